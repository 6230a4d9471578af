package bench

import (
	"testing"
	"time"
)

// TestLedgerCountsStaleCommit feeds the ledger the history of a takeover in
// broker order and sees a commit by the fenced-out holder counted, and the
// legitimate ones not.
func TestLedgerCountsStaleCommit(t *testing.T) {
	l := newLedger("w")
	t0 := time.Unix(1000, 0)
	ns := func(d time.Duration) int64 { return t0.Add(d).UnixNano() }
	// epoch 1 holds "a", delivers seqs 10 and 11, commits 11.
	l.record("a", recState{epoch: 1, node: "n1", held: true}, t0)
	l.delivery("a", 10, 1, ns(time.Millisecond), true)
	l.delivery("a", 11, 1, ns(2*time.Millisecond), true)
	l.cursorWrite("a", 11, t0.Add(2500*time.Microsecond))
	// n1 delivers 12 and 13; n2 seizes (epoch 2) before n1 commits.
	l.delivery("a", 12, 1, ns(3*time.Millisecond), true)
	l.record("a", recState{epoch: 2, node: "n2", held: true}, t0.Add(4*time.Millisecond))
	l.delivery("a", 13, 1, ns(5*time.Millisecond), true) // after the seize: a stale delivery
	// A broken fence would let n1's commit of 13 through: stored after the
	// epoch 2 record, and 13 was delivered only under epoch 1.
	l.cursorWrite("a", 13, t0.Add(5500*time.Microsecond))
	// n2 delivers 12..14 and commits 14: legitimate. Its delivery of 13
	// came after the stale commit, which it does not excuse.
	for _, seq := range []uint64{12, 13, 14} {
		l.delivery("a", seq, 2, ns(8*time.Millisecond), true)
	}
	l.cursorWrite("a", 14, t0.Add(8500*time.Microsecond))
	// A failure count (cursor not moved) is not a commit.
	l.cursorWrite("a", 14, t0.Add(8600*time.Microsecond))
	// A commit while the record is released is stale whatever delivered it.
	l.record("a", recState{epoch: 2, node: "n2", held: false}, t0.Add(9*time.Millisecond))
	l.delivery("a", 15, 2, ns(9500*time.Microsecond), true)
	l.cursorWrite("a", 15, t0.Add(10*time.Millisecond))

	v, err := l.check()
	if err != nil {
		t.Fatal(err)
	}
	if v.commits != 4 || v.staleCommits != 2 {
		t.Errorf("%d commits, %d stale; want 4 and 2: %v", v.commits, v.staleCommits, v.staleCommitExamples)
	}
	if v.staleDeliveries != 1 {
		t.Errorf("%d stale deliveries, want 1 (seq 13 under epoch 1 after the seize)", v.staleDeliveries)
	}
	if v.measuredDeliveries != 8 {
		t.Errorf("%d deliveries checked, want 8", v.measuredDeliveries)
	}
}

func TestParseOwnerLine(t *testing.T) {
	l, err := parseOwnerLine("d id-3 42 7 1001 123456789 223456789")
	if err != nil || l.kind != 'd' || l.id != "id-3" || l.seq != 42 || l.epoch != 7 || l.n != 1001 || l.sent != 123456789 || l.at != 223456789 {
		t.Errorf("%+v %v", l, err)
	}
	if l, err := parseOwnerLine("f lease_watchdog_fence"); err != nil || l.kind != 'f' || l.text != "lease_watchdog_fence" {
		t.Errorf("%+v %v", l, err)
	}
	for _, bad := range []string{"", "x", "d id-3 42", "d id 1 2 3 4 z"} {
		if _, err := parseOwnerLine(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}
