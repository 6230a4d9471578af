package worker

import (
	"testing"
	"time"
)

// TestRank: each id orders the nodes its own way (so that one worker tries
// a new id first and the others, told by the watch, do not try it), every
// delay within its span, the same for the same id and node.
func TestRank(t *testing.T) {
	const span = 10 * time.Millisecond
	first := map[string]int{}
	for i := range 1000 {
		id := "id-" + string(rune('a'+i%26)) + time.Duration(i).String()
		best, bestNode := span, ""
		for _, node := range []string{"w1", "w2", "w3", "w4"} {
			r := rank(id, node, span)
			if r < 0 || r >= span {
				t.Fatalf("rank(%q, %q) = %v, outside [0, %v)", id, node, r, span)
			}
			if r != rank(id, node, span) {
				t.Fatalf("rank(%q, %q) is not stable", id, node)
			}
			if r < best {
				best, bestNode = r, node
			}
		}
		first[bestNode]++
	}
	for _, node := range []string{"w1", "w2", "w3", "w4"} {
		if n := first[node]; n < 150 || n > 350 {
			t.Errorf("node %s tries first for %d of 1000 ids; want about 250: %v", node, n, first)
		}
	}
	if rank("x", "w1", 0) != 0 {
		t.Error("a zero span must give no delay")
	}
}

// TestClaimWait: with the live nodes listed, each new id has exactly one
// first choice among them (no wait), the same one whichever worker asks;
// ids spread evenly; every other worker waits at least claimFallback; a
// node dropped as gone is never the first choice.
func TestClaimWait(t *testing.T) {
	nodes := []string{"w1", "w2", "w3", "w4"}
	workers := map[string]*Worker{}
	for _, n := range nodes {
		wk := &Worker{cfg: Config{Node: n, TTL: time.Second, Spread: time.Millisecond, MaxSpread: 100 * time.Millisecond}, held: map[string]*holding{}}
		list := append([]string(nil), nodes...)
		wk.peers.Store(&list)
		workers[n] = wk
	}
	first := map[string]int{}
	for i := range 2000 {
		id := "id-" + time.Duration(i).String()
		var now []string
		for _, n := range nodes {
			if d := workers[n].claimWait(id, false); d == 0 {
				now = append(now, n)
			} else if d < claimFallback {
				t.Fatalf("%s waits %v for %q, less than the fallback", n, d, id)
			}
		}
		if len(now) != 1 {
			t.Fatalf("id %q: first choices %v, want exactly one", id, now)
		}
		first[now[0]]++
	}
	for _, n := range nodes {
		if c := first[n]; c < 350 || c > 650 {
			t.Errorf("node %s is the first choice of %d of 2000 ids; want about 500: %v", n, c, first)
		}
	}
	for _, n := range nodes[1:] {
		// Once: the lapses of the node's other ids change nothing more.
		if !workers[n].dropPeer("w1") || workers[n].dropPeer("w1") {
			t.Fatalf("%s: dropPeer(w1) is not true once, then false", n)
		}
	}
	for i := range 500 {
		id := "id-" + time.Duration(i).String()
		zero := 0
		for _, n := range nodes[1:] {
			if workers[n].claimWait(id, i%2 == 0) == 0 {
				zero++
			}
		}
		if zero != 1 {
			t.Fatalf("id %q: %d first choices among the nodes left, want 1", id, zero)
		}
	}
}
