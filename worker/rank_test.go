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
