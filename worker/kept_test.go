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
