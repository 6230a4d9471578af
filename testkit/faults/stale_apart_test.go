package faults

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencepost/fencepost/testkit/history"
)

// Stale deliveries that a fault explains (docs/design.md, invariant 4).
// The checker calls a delivery stale when its handler was entered after a
// newer epoch of its unit had acted. Two kinds of them are what the
// contract allows, and a round counts them apart instead of failing:
//
//   - a holder displaced by a forced seize of a live holder may hand out
//     what it has in hand until it learns of the seize;
//   - a call decided before a pause: a process stopped between the
//     drain's last check and the handler's first instruction, and woken
//     after a takeover, runs the call it had decided on (invariant 4,
//     point 3). No check can close that window; the fenced commit is the
//     output gate.
//
// Every other stale delivery is a violation, and so is a second delivery
// after the same pause: every check after the wake sees the lapsed lease.

// pauseGrace is how soon after its SIGCONT a stopped owner is taken to
// run the call it had decided on before the stop (the scheduler of a
// loaded machine, under -race).
const pauseGrace = time.Second

// pausedCalls are the deliveries of h (indices) that are calls decided
// before a pause: each is stale, and
//
//   - its node's process was stopped (OwnerStop) at f.at and continued at
//     f.end, and the handler was entered from f.at to f.end+pauseGrace;
//   - the first act of a newer epoch of its unit (a delivery or a commit)
//     came after f.at: a holder already stale when it was stopped is a
//     violation;
//   - it is the first delivery of its id by its (node, epoch) since f.at.
//
// shards is the world's (0: per-id), whose units are its shards.
func pausedCalls(h history.History, faults []faultAt, shards int) map[int]bool {
	// acted[u]: when each epoch of unit u first acted.
	acted := map[string]map[uint64]time.Time{}
	act := func(unit string, epoch uint64, at time.Time) {
		m := acted[unit]
		if m == nil {
			m = map[uint64]time.Time{}
			acted[unit] = m
		}
		if t, ok := m[epoch]; !ok || at.Before(t) {
			m[epoch] = at
		}
	}
	for _, d := range h.Deliveries {
		act(history.UnitOf(d.ID, shards), d.Epoch, d.At)
	}
	for _, c := range h.Commits {
		act(c.ID, c.Epoch, c.At) // a commit's ID is its unit
	}
	// newer: when an epoch of unit above epoch first acted.
	newer := func(unit string, epoch uint64) (time.Time, bool) {
		var first time.Time
		for e, at := range acted[unit] {
			if e > epoch && (first.IsZero() || at.Before(first)) {
				first = at
			}
		}
		return first, !first.IsZero()
	}
	out := map[int]bool{}
	for _, f := range faults {
		if f.kind != OwnerStop {
			continue
		}
		seen := map[[3]any]bool{} // (id, node, epoch) delivered to since f.at
		for i, d := range h.Deliveries {
			if d.Node != f.target || d.At.Before(f.at) || d.At.After(f.end.Add(pauseGrace)) {
				continue
			}
			k := [3]any{d.ID, d.Node, d.Epoch}
			if seen[k] {
				continue
			}
			seen[k] = true
			n, ok := newer(history.UnitOf(d.ID, shards), d.Epoch)
			if ok && !n.Before(f.at) && n.Before(d.At) {
				out[i] = true
			}
		}
	}
	return out
}

// staleApart splits a round's stale deliveries (rep's): those of a
// holder displaced by a forced seize, made after the seize began
// (ofSeized), and the calls decided before a pause (paused: pausedCalls)
// are counted apart; it returns how many remain (violations, with
// examples). check is the round's check (history.Check, or a sharded
// world's), shards the world's (0: per-id), whose seizes are of shard
// units.
func staleApart(h history.History, rep history.Report, seizes []seized, faults []faultAt, shards int, check func(history.History) history.Report) (others int, examples []violation, ofSeized, paused int) {
	if rep.StaleDeliveries == 0 {
		return 0, nil, 0, 0
	}
	from := map[[2]any]time.Time{}
	for _, s := range seizes {
		k := [2]any{s.id, s.epoch}
		if at, ok := from[k]; !ok || s.at.Before(at) {
			from[k] = s.at
		}
	}
	pausedCall := pausedCalls(h, faults, shards)
	if len(from) == 0 && len(pausedCall) == 0 {
		return rep.StaleDeliveries, violationsOf(rep, "stale delivery"), 0, 0
	}
	notSeized, kept := h, h
	notSeized.Deliveries, kept.Deliveries = nil, nil
	for i, dl := range h.Deliveries {
		if at, ok := from[[2]any{history.UnitOf(dl.ID, shards), dl.Epoch}]; ok && dl.At.After(at) {
			continue
		}
		notSeized.Deliveries = append(notSeized.Deliveries, dl)
		if !pausedCall[i] {
			kept.Deliveries = append(kept.Deliveries, dl)
		}
	}
	afterSeizes := rep
	if len(from) > 0 {
		afterSeizes = check(notSeized)
	}
	r := check(kept)
	return r.StaleDeliveries, violationsOf(r, "stale delivery"), rep.StaleDeliveries - afterSeizes.StaleDeliveries, afterSeizes.StaleDeliveries - r.StaleDeliveries
}

// staleHistory: id a posted 6 times; epoch 1 (node n1) delivers 1 and 2,
// epoch 3 (n3) acts at 100 ms, then the deliveries given.
func staleHistory(t0 time.Time, late ...history.Delivery) history.History {
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	h := history.History{}
	for i := 1; i <= 6; i++ {
		h.Sends = append(h.Sends, history.Send{Producer: "p", ID: "a", Key: fmt.Sprint("k", i), Outcome: history.Posted, Seq: uint64(i), Invoked: at(0), Returned: at(1)})
	}
	h.Deliveries = []history.Delivery{staleDL(t0, 1, 1, 10), staleDL(t0, 2, 1, 20), staleDL(t0, 2, 3, 100), staleDL(t0, 3, 3, 110)}
	h.Deliveries = append(h.Deliveries, late...)
	return h
}

// staleDL is a delivery of id a's message seq by epoch e (node n<e>) at ms.
func staleDL(t0 time.Time, seq int, epoch uint64, ms int) history.Delivery {
	return history.Delivery{ID: "a", Key: fmt.Sprint("k", seq), Seq: uint64(seq), Node: fmt.Sprint("n", epoch), Epoch: epoch, Revision: epoch, At: t0.Add(time.Duration(ms) * time.Millisecond)}
}

// TestStaleApart_Seized: a stale delivery by a holder displaced by a
// forced seize, after the seize, is counted apart; one of an epoch not
// seized, or of the seized epoch before its seize, stays a violation.
func TestStaleApart_Seized(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	h := staleHistory(t0,
		staleDL(t0, 4, 1, 120), // epoch 1, seized at 50: counted apart
		staleDL(t0, 4, 2, 130), // epoch 2, never seized: a violation
		staleDL(t0, 4, 3, 140), staleDL(t0, 5, 3, 150), staleDL(t0, 6, 3, 160))
	rep := history.Check(h)
	if rep.StaleDeliveries != 2 {
		t.Fatalf("the checker counts %d stale deliveries, want 2: %s", rep.StaleDeliveries, rep)
	}
	others, ex, ofSeized, paused := staleApart(h, rep, []seized{{id: "a", epoch: 1, at: at(50)}}, nil, 0, history.Check)
	if others != 1 || ofSeized != 1 || paused != 0 || len(ex) != 1 || !strings.Contains(ex[0].text, "/2 ") {
		t.Errorf("others %d %q, of seized holders %d, paused %d; want 1 (epoch 2), 1 and 0", others, texts(ex), ofSeized, paused)
	}
	// A seize after the stale delivery exempts nothing.
	if others, _, ofSeized, _ := staleApart(h, rep, []seized{{id: "a", epoch: 1, at: at(125)}}, nil, 0, history.Check); others != 2 || ofSeized != 0 {
		t.Errorf("seized after the delivery: others %d, of seized holders %d; want 2 and 0", others, ofSeized)
	}
	// No seize: every stale delivery is a violation.
	if others, _, ofSeized, _ := staleApart(h, rep, nil, nil, 0, history.Check); others != 2 || ofSeized != 0 {
		t.Errorf("no seize: others %d, of seized holders %d; want 2 and 0", others, ofSeized)
	}
}

// TestStaleApart_PausedCall: the one call a stopped holder had decided on
// before its stop, run on waking after a takeover, is counted apart; a
// second delivery after the wake, one long after it, one by a holder that
// was stale before it was stopped, and one by a node that was not
// stopped stay violations.
func TestStaleApart_PausedCall(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	stop := func(node string, from, to int) faultAt {
		return faultAt{kind: OwnerStop, target: node, at: at(from), end: at(to)}
	}
	cases := []struct {
		name          string
		late          []history.Delivery
		faults        []faultAt
		others, pause int
	}{
		// n1 stopped at 30 ms, epoch 3 acts at 100, n1 wakes at 200 and
		// runs its call at 205.
		{"the decided call", []history.Delivery{staleDL(t0, 3, 1, 205)}, []faultAt{stop("n1", 30, 200)}, 0, 1},
		// Entered a hair before the harness noted the SIGCONT.
		{"entered before the end was noted", []history.Delivery{staleDL(t0, 3, 1, 199)}, []faultAt{stop("n1", 30, 200)}, 0, 1},
		{"a second call after the wake", []history.Delivery{staleDL(t0, 3, 1, 205), staleDL(t0, 4, 1, 206)}, []faultAt{stop("n1", 30, 200)}, 1, 1},
		{"long after the wake", []history.Delivery{staleDL(t0, 3, 1, 200+int(pauseGrace/time.Millisecond)+50)}, []faultAt{stop("n1", 30, 200)}, 1, 0},
		// Stopped at 105, after epoch 3 acted at 100: stale before it stopped.
		{"stale before the stop", []history.Delivery{staleDL(t0, 3, 1, 300)}, []faultAt{stop("n1", 105, 290)}, 1, 0},
		// Epoch 3's first act is a commit at 20 ms, before n1's stop.
		{"stale before the stop, by a commit", []history.Delivery{staleDL(t0, 3, 1, 205)}, []faultAt{stop("n1", 30, 200)}, 1, 0},
		{"another node was stopped", []history.Delivery{staleDL(t0, 3, 1, 205)}, []faultAt{stop("n2", 30, 200)}, 1, 0},
		{"a kill, not a stop", []history.Delivery{staleDL(t0, 3, 1, 205)}, []faultAt{{kind: OwnerKill, target: "n1", at: at(30)}}, 1, 0},
		{"no fault", []history.Delivery{staleDL(t0, 3, 1, 205)}, nil, 1, 0},
	}
	for _, c := range cases {
		h := staleHistory(t0, c.late...)
		if strings.HasSuffix(c.name, "by a commit") {
			h.Commits = []history.Commit{{ID: "a", Node: "n3", Epoch: 3, Revision: 3, Cursor: 1, StreamSeq: 10, At: at(20)}}
		}
		rep := history.Check(h)
		if rep.StaleDeliveries != len(c.late) {
			t.Fatalf("%s: the checker counts %d stale deliveries, want %d: %s", c.name, rep.StaleDeliveries, len(c.late), rep)
		}
		others, ex, ofSeized, paused := staleApart(h, rep, nil, c.faults, 0, history.Check)
		if others != c.others || paused != c.pause || ofSeized != 0 || len(ex) != c.others {
			t.Errorf("%s: others %d %q, paused %d, of seized holders %d; want %d, %d and 0", c.name, others, texts(ex), paused, ofSeized, c.others, c.pause)
		}
	}
}

// TestStaleApart_PausedCallSharded: in a sharded world the newer epoch is
// the shard's, proven by a delivery of another id of the shard.
func TestStaleApart_PausedCallSharded(t *testing.T) {
	const shards = 4
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	// Two ids of one shard.
	a, b := "a", ""
	for i := 0; b == ""; i++ {
		if id := fmt.Sprint("b", i); history.UnitOf(id, shards) == history.UnitOf(a, shards) {
			b = id
		}
	}
	h := history.History{}
	for i, id := range []string{a, b} {
		h.Sends = append(h.Sends, history.Send{Producer: id, ID: id, Key: id + "1", Outcome: history.Posted, Seq: uint64(i + 1), Invoked: at(0), Returned: at(1)})
	}
	h.Deliveries = []history.Delivery{
		{ID: b, Key: b + "1", Seq: 2, Node: "n3", Epoch: 3, Revision: 3, At: at(100)}, // the shard's epoch 3 acts, on b
		{ID: a, Key: a + "1", Seq: 1, Node: "n1", Epoch: 1, Revision: 1, At: at(205)}, // n1's decided call, on a
	}
	rep := history.CheckShards(h, shards, nil, true)
	if rep.StaleDeliveries != 1 {
		t.Fatalf("the checker counts %d stale deliveries, want 1: %s", rep.StaleDeliveries, rep)
	}
	check := func(h history.History) history.Report { return history.CheckShards(h, shards, nil, true) }
	stopped := []faultAt{{kind: OwnerStop, target: "n1", at: at(30), end: at(200)}}
	if others, ex, _, paused := staleApart(h, rep, nil, stopped, shards, check); others != 0 || paused != 1 {
		t.Errorf("others %d %q, paused %d; want 0 and 1", others, texts(ex), paused)
	}
	// Per id, nothing newer acted on a: pausedCalls must use the shard.
	if got := pausedCalls(h, stopped, 0); len(got) != 0 {
		t.Errorf("per-id units: %v counted apart, want none", got)
	}
}
