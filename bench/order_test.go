package bench

import (
	"testing"
	"time"
)

// TestCheckOrder: a message first delivered after a later message of its
// id (by stream sequence) is out of order; a message delivered again
// after later ones (a duplicate), messages of other ids and a message
// never delivered (lost) are not; a message whose sequence is unknown is
// not checked.
func TestCheckOrder(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) int64 { return t0.Add(time.Duration(ms) * time.Millisecond).UnixNano() }
	ids := []string{"a", "b"}
	s := newSide("x", Config{}, t0, ids)
	// a: messages 1, 2, 3, 5 at sequences 10, 11, 12, 15; b: message 4 at
	// sequence 13; a's message 6 with no known sequence.
	for _, m := range []struct {
		n   uint64
		idx int
		seq uint64
	}{{1, 0, 10}, {2, 0, 11}, {3, 0, 12}, {4, 1, 13}, {5, 0, 15}, {6, 0, 0}} {
		s.markPosted(m.n, m.idx, m.seq)
	}
	s.deliverAt(1, 4, at(0), at(1))  // b before a's: another id
	s.deliverAt(0, 1, at(0), at(10)) // a:1
	s.deliverAt(0, 3, at(0), at(20)) // a:3 overtakes a:2
	s.deliverAt(0, 2, at(0), at(30)) // a:2, out of order
	s.deliverAt(0, 1, at(0), at(40)) // a:1 again: a duplicate
	s.deliverAt(0, 6, at(0), at(5))  // sequence unknown: not checked
	// a:5 (sequence 15) never delivered: lost, not out of order.
	c := s.checkOrder(ids)
	if c.checked != 4 || c.violations != 1 || len(c.examples) != 1 {
		t.Fatalf("checked %d, violations %d %v; want 4 checked, 1 violation (a's message 2)", c.checked, c.violations, c.examples)
	}
	t.Log(c.examples[0])

	// In order, with a duplicate of an older message last: none.
	s = newSide("y", Config{}, t0, ids)
	for n := uint64(1); n <= 3; n++ {
		s.markPosted(n, 0, 10+n)
		s.deliverAt(0, n, at(0), at(int(n)))
	}
	s.deliverAt(0, 1, at(0), at(9))
	if c := s.checkOrder(ids); c.checked != 3 || c.violations != 0 {
		t.Fatalf("in order: checked %d, violations %d %v", c.checked, c.violations, c.examples)
	}
}
