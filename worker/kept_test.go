package worker

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// TestKept: an id's messages are handed over whole once; an id let go (held
// elsewhere, taken before) is never whole again; the bound turns an id
// gone instead of keeping part of it; off keeps nothing.
func TestKept(t *testing.T) {
	msg := func(seq uint64) *jetstream.RawStreamMsg { return &jetstream.RawStreamMsg{Sequence: seq} }
	k := newKept(true)
	k.add("a", msg(1))
	k.add("b", msg(2))
	k.add("a", msg(3))
	got, whole := k.take("a")
	if !whole || len(got) != 2 || got[0].Sequence != 1 || got[1].Sequence != 3 {
		t.Fatalf("take a: %v whole=%v", got, whole)
	}
	if _, whole := k.take("a"); whole {
		t.Fatal("a taken twice as whole")
	}
	k.add("a", msg(4))
	if _, whole := k.take("a"); whole {
		t.Fatal("a whole again after it was taken")
	}
	k.drop("b") // another node claimed it
	k.add("b", msg(5))
	if _, whole := k.take("b"); whole {
		t.Fatal("b whole after it was let go")
	}
	if got, whole := k.take("never-seen"); !whole || len(got) != 0 {
		t.Fatalf("an id never seen has no messages, all of them: %v %v", got, whole)
	}
	if k.n != 0 {
		t.Fatalf("n = %d after every id was taken or dropped", k.n)
	}

	full := newKept(true)
	for i := range keptMax {
		full.add("x", msg(uint64(i+1)))
	}
	full.add("y", msg(1))
	if _, whole := full.take("y"); whole {
		t.Fatal("y kept beyond the bound")
	}
	if got, whole := full.take("x"); !whole || len(got) != keptMax {
		t.Fatalf("x: %d kept, whole=%v", len(got), whole)
	}

	off := newKept(false)
	off.add("a", msg(1))
	if _, whole := off.take("a"); whole {
		t.Fatal("kept while off")
	}
}

// TestKept_Chained: on a partitioned world an id's posts are kept again
// after its holding took them (they prove themselves at the next claim);
// one held by another node keeps nothing until the watch shows it free;
// a reset, or the end of a partition subscription after the post was kept,
// lets everything go and keeping goes on; an id with nothing kept starts
// with a drain.
func TestKept_Chained(t *testing.T) {
	msg := func(seq uint64) *jetstream.RawStreamMsg { return &jetstream.RawStreamMsg{Sequence: seq} }
	k := newChainedKept()
	k.add("a", msg(1))
	k.add("a", msg(2))
	got, whole := k.take("a")
	if !whole || len(got) != 2 {
		t.Fatalf("take a: %v whole=%v", got, whole)
	}
	if got, whole := k.take("a"); whole || len(got) != 0 {
		t.Fatalf("a taken twice: %v whole=%v", got, whole)
	}
	k.add("a", msg(3)) // after its holding ended
	if got, whole := k.take("a"); !whole || len(got) != 1 || got[0].Sequence != 3 {
		t.Fatalf("a's later post: %v whole=%v", got, whole)
	}
	if got, whole := k.take("never-seen"); whole || len(got) != 0 {
		t.Fatalf("an id with nothing kept: %v whole=%v", got, whole)
	}

	k.drop("b") // another node claimed it
	k.add("b", msg(4))
	if _, whole := k.take("b"); whole {
		t.Fatal("b kept while another node holds it")
	}
	k.free("b") // released
	k.add("b", msg(5))
	if got, whole := k.take("b"); !whole || len(got) != 1 || got[0].Sequence != 5 {
		t.Fatalf("b after it was freed: %v whole=%v", got, whole)
	}

	k.add("c", msg(6))
	k.reset() // a partition left, or the connection reconnected
	if _, whole := k.take("c"); whole {
		t.Fatal("c's post kept through a reset")
	}
	k.add("c", msg(7))
	if got, whole := k.take("c"); !whole || len(got) != 1 || got[0].Sequence != 7 {
		t.Fatalf("keeping after a reset: %v whole=%v", got, whole)
	}
	if k.n != 0 {
		t.Fatalf("n = %d after every id was taken", k.n)
	}

	// A subscription to d's partition ended after its post was kept: it
	// goes, at the claim or at the next post. e's partition's did not.
	k.addSince("d", msg(8), 0)
	k.addSince("e", msg(9), 3)
	if _, whole := k.takeSince("d", 1); whole {
		t.Fatal("d's post kept through the end of its partition's subscription")
	}
	if got, whole := k.takeSince("e", 3); !whole || len(got) != 1 {
		t.Fatalf("e: %v whole=%v", got, whole)
	}
	k.addSince("d", msg(10), 1)
	k.addSince("d", msg(11), 2)
	if got, whole := k.takeSince("d", 2); !whole || len(got) != 1 || got[0].Sequence != 11 {
		t.Fatalf("d after another end: %v whole=%v", got, whole)
	}
	if k.n != 0 || len(k.endsAt) != 0 {
		t.Fatalf("n = %d, %d ids with ends after every id was taken", k.n, len(k.endsAt))
	}

	// The consumer's keeping stops for good at a reset.
	off := newKept(true)
	off.reset()
	off.add("a", msg(1))
	if _, whole := off.take("a"); whole {
		t.Fatal("the consumer's keeping went on after a reset")
	}
}
