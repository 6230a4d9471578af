package faults

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
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
