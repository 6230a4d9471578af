package faults

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/testkit/history"
)

// Counter rounds (docs/design.md 3.12): the owners and the
// final drain run a state handler that adds one to its id's counter (the
// state key counterKey) for every message, committed with the message in
// one fenced atomic batch. At the end every id's counter must equal the
// messages stored in its mailbox: an effect applied twice (a redelivery
// after a takeover, a stale holder's batch stored) or lost (a batch whose
// cursor landed without its state) puts a counter off.

// OwnerSeize is a fault of counter rounds and sharded ones: every id (in a
// sharded world, every shard unit) held by one owner is force-seized by
// another node ("operator") while the owner is live, and released at once,
// so that the owners claim them again.
const OwnerSeize = "owner-seize"

// counterKey is the state key the counter rounds count in.
const counterKey = "count"

// counting returns the state handler that runs h (the report of the
// delivery) and then adds one to the id's counter.
func counting(h drain.Handler) drain.StateHandler {
	return func(ctx context.Context, m drain.Message, st *drain.State) error {
		if err := h(ctx, m); err != nil {
			return err
		}
		n := 0
		if v, ok := st.Get(counterKey); ok {
			var err error
			if n, err = strconv.Atoi(string(v)); err != nil {
				return fmt.Errorf("faults: the counter of %q is %q: %w", m.ID, v, err)
			}
		}
		return st.Put(counterKey, []byte(strconv.Itoa(n+1)))
	}
}

// seized is a holder displaced by a forced seize: id (a sharded world's
// shard unit) under epoch, from at.
type seized struct {
	id    string
	epoch uint64
	at    time.Time
}

// seizeOwner force-seizes, as node "operator" through the admin client
// (direct), every id that the holder of a randomly chosen held id holds,
// and releases each at once; in a world of shards (> 0), every shard unit
// of the ids that the holder of one of them holds. It returns the holders
// it displaced (read from the record just before each seize) and whether
// anything was seized.
func seizeOwner(ctx context.Context, d *deployment, mbIDs []string, shards int) ([]seized, error) {
	w, err := d.admin.World(ctx, d.world)
	if err != nil {
		return nil, err
	}
	var units []string
	for _, id := range mbIDs {
		if u := history.UnitOf(id, shards); !slices.Contains(units, u) {
			units = append(units, u)
		}
	}
	held := map[string]ownership.Status{}
	var nodes []string
	for _, id := range units {
		st, err := w.Ownership.Owner(ctx, id)
		if err != nil {
			return nil, err
		}
		if st.Held {
			held[id] = st
			nodes = append(nodes, st.Node)
		}
	}
	if len(nodes) == 0 {
		return nil, nil
	}
	victim := nodes[rand.IntN(len(nodes))]
	ids := make([]string, 0, len(held))
	for id, st := range held {
		if st.Node == victim {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	var out []seized
	for _, id := range ids {
		at := time.Now()
		st, err := w.Ownership.Owner(ctx, id)
		if err != nil {
			return out, err
		}
		if !st.Held || st.Node != victim {
			continue // moved meanwhile
		}
		if err := seizeOne(ctx, w, id); err != nil {
			return out, err
		}
		out = append(out, seized{id: id, epoch: st.Epoch, at: at})
	}
	return out, nil
}

// seizeOne force-seizes id as "operator" and releases it.
func seizeOne(ctx context.Context, w *client.World, id string) error {
	const node = "operator"
	for try := 0; ; try++ {
		_, err := w.Ownership.Seize(ctx, id, node, time.Second, true)
		switch {
		case err == nil:
			return w.Ownership.Release(ctx, id, node)
		case errors.Is(err, ownership.ErrContended) && try < 10:
			continue
		default:
			return fmt.Errorf("seize %q: %w", id, err)
		}
	}
}

// staleOfSeized splits the stale deliveries: those of a holder displaced
// by a forced seize, made after the seize began, are what a forced seize
// of a live holder allows (it may hand out what it has in hand until it
// learns of the seize; its commit is refused, so the message is delivered
// again and its effect applied once: the counters check that). It returns
// how many stale deliveries remain without them (violations, with
// examples) and how many were the seized holders'. check is the run's
// check (history.Check, or a sharded world's), shards the world's (0:
// per-id), whose seizes are of shard units.
func staleOfSeized(h history.History, rep history.Report, seizes []seized, shards int, check func(history.History) history.Report) (others int, examples []violation, ofSeized int) {
	if len(seizes) == 0 || rep.StaleDeliveries == 0 {
		return rep.StaleDeliveries, violationsOf(rep, "stale delivery"), 0
	}
	from := map[[2]any]time.Time{}
	for _, s := range seizes {
		k := [2]any{s.id, s.epoch}
		if at, ok := from[k]; !ok || s.at.Before(at) {
			from[k] = s.at
		}
	}
	kept := h
	kept.Deliveries = nil
	for _, dl := range h.Deliveries {
		if at, ok := from[[2]any{history.UnitOf(dl.ID, shards), dl.Epoch}]; ok && dl.At.After(at) {
			continue
		}
		kept.Deliveries = append(kept.Deliveries, dl)
	}
	r := check(kept)
	return r.StaleDeliveries, violationsOf(r, "stale delivery"), rep.StaleDeliveries - r.StaleDeliveries
}

// counterFigures is what the counter check found.
type counterFigures struct {
	Checked, Off int
	Counted      int64 // the sum of the counters
	Stored       int   // the messages stored in the mailboxes (what the counters must sum to)
	Examples     []string
}

// checkCounters reads every id's counter (from its state as stored) and
// compares it with the messages stored in its mailbox: the sequences of
// its posted sends, and of any other delivery (a send of unknown outcome
// that was stored; a key stored twice counts once per copy).
func checkCounters(ctx context.Context, d *deployment, h history.History, mbIDs []string) (counterFigures, error) {
	var f counterFigures
	w, err := d.admin.World(ctx, d.world)
	if err != nil {
		return f, err
	}
	stored := map[string]map[uint64]bool{}
	add := func(id string, seq uint64) {
		if stored[id] == nil {
			stored[id] = map[uint64]bool{}
		}
		stored[id][seq] = true
	}
	for _, s := range h.Sends {
		if s.Outcome == history.Posted {
			add(s.ID, s.Seq)
		}
	}
	for _, dl := range h.Deliveries {
		add(dl.ID, dl.Seq)
	}
	for _, id := range mbIDs {
		st, err := w.Mailboxes.ReadState(ctx, id)
		if err != nil {
			return f, fmt.Errorf("the counter of %q: %w", id, err)
		}
		got := int64(0)
		if v, ok := st.Values[counterKey]; ok {
			if got, err = strconv.ParseInt(string(v), 10, 64); err != nil {
				return f, fmt.Errorf("the counter of %q is %q: %w", id, v, err)
			}
		}
		want := int64(len(stored[id]))
		f.Checked++
		f.Counted += got
		f.Stored += len(stored[id])
		if got != want {
			f.Off++
			if len(f.Examples) < 10 {
				f.Examples = append(f.Examples, fmt.Sprintf("%s: counter %d, %d messages stored (state at cursor %d)", id, got, want, st.Cursor))
			}
		}
	}
	return f, nil
}

// TestStaleOfSeized: a stale delivery by a holder displaced by a forced
// seize, after the seize, is counted apart; one of an epoch not seized,
// or of the seized epoch before its seize, stays a violation.
func TestStaleOfSeized(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	h := history.History{}
	for i := 1; i <= 6; i++ {
		h.Sends = append(h.Sends, history.Send{Producer: "p", ID: "a", Key: fmt.Sprint("k", i), Outcome: history.Posted, Seq: uint64(i), Invoked: at(0), Returned: at(1)})
	}
	dl := func(seq int, epoch uint64, ms int) history.Delivery {
		return history.Delivery{ID: "a", Key: fmt.Sprint("k", seq), Seq: uint64(seq), Node: fmt.Sprint("n", epoch), Epoch: epoch, Revision: epoch, At: at(ms)}
	}
	h.Deliveries = []history.Delivery{
		dl(1, 1, 10), dl(2, 1, 20), // epoch 1 before anything else
		dl(2, 3, 100), dl(3, 3, 110), // epoch 3 acts at 100
		dl(4, 1, 120), // epoch 1, seized at 50: counted apart
		dl(4, 2, 130), // epoch 2, never seized: a violation
		dl(4, 3, 140), dl(5, 3, 150), dl(6, 3, 160),
	}
	rep := history.Check(h)
	if rep.StaleDeliveries != 2 {
		t.Fatalf("the checker counts %d stale deliveries, want 2: %s", rep.StaleDeliveries, rep)
	}
	others, ex, ofSeized := staleOfSeized(h, rep, []seized{{id: "a", epoch: 1, at: at(50)}}, 0, history.Check)
	if others != 1 || ofSeized != 1 || len(ex) != 1 || !strings.Contains(ex[0].text, "/2 ") {
		t.Errorf("others %d %q, of seized holders %d; want 1 (epoch 2) and 1", others, texts(ex), ofSeized)
	}
	// A seize after the stale delivery exempts nothing.
	if others, _, ofSeized := staleOfSeized(h, rep, []seized{{id: "a", epoch: 1, at: at(125)}}, 0, history.Check); others != 2 || ofSeized != 0 {
		t.Errorf("seized after the delivery: others %d, of seized holders %d; want 2 and 0", others, ofSeized)
	}
	// No seize: every stale delivery is a violation.
	if others, _, ofSeized := staleOfSeized(h, rep, nil, 0, history.Check); others != 2 || ofSeized != 0 {
		t.Errorf("no seize: others %d, of seized holders %d; want 2 and 0", others, ofSeized)
	}
}
