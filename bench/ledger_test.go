package bench

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencepost/fencepost/internal/wire"
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
	if l, err := parseOwnerLine("r 3"); err != nil || l.kind != 'r' || l.n != 3 {
		t.Errorf("%+v %v", l, err)
	}
	if l, err := parseOwnerLine("r"); err != nil || l.kind != 'r' || l.n != 0 {
		t.Errorf("%+v %v", l, err)
	}
	if l, err := parseOwnerLine("f"); err != nil || l.kind != 'f' || l.text != "" {
		t.Errorf("%+v %v", l, err)
	}
	if l, err := parseOwnerLine("f lease_watchdog_fence"); err != nil || l.kind != 'f' || l.text != "lease_watchdog_fence" {
		t.Errorf("%+v %v", l, err)
	}
	for _, bad := range []string{"", "x", "d id-3 42", "d id 1 2 3 4 z", "r x", "rr", "r ", "fX", "dX id 1 2 3 4 5"} {
		if _, err := parseOwnerLine(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// TestLedgerExplainsLoss: a lost message is named with what the bucket
// stream shows of it: a commit that passed it (skipped), or none that
// reached it (removed without a commit).
func TestLedgerExplainsLoss(t *testing.T) {
	l := newLedger("w")
	t0 := time.Unix(1000, 0)
	l.record("a", recState{epoch: 3, node: "n1", held: true}, t0)
	l.record("b", recState{epoch: 1, node: "n1", held: true}, t0)
	l.delivery("a", 10, 3, t0.UnixNano(), true)
	l.cursorWrite("a", 10, t0.Add(time.Millisecond))
	l.cursorWrite("b", 11, t0.Add(2*time.Millisecond)) // another id's commit, between
	l.delivery("a", 14, 3, t0.UnixNano(), true)
	l.cursorWrite("a", 14, t0.Add(3*time.Millisecond)) // passes 12, never delivered

	skipped := l.explainLoss("a", 7, 12)
	if want := `"a" message 7 at mailbox sequence 12: committed without a delivery: the cursor moved from 10 to 14 under epoch 3 (held true) at 00:16:40.003`; skipped != want {
		t.Errorf("skipped message:\n got %s\nwant %s", skipped, want)
	}
	removed := l.explainLoss("a", 8, 20)
	if want := `"a" message 8 at mailbox sequence 20: removed with no commit covering it: the id's cursor reached 14 only`; removed != want {
		t.Errorf("removed message:\n got %s\nwant %s", removed, want)
	}
	// The bench counted it lost, the owners' reports name a delivery.
	if got := l.explainLoss("a", 9, 14); !strings.Contains(got, "yet delivery reports name it") {
		t.Errorf("a lost message the ledger saw delivered: %s", got)
	}
	if got := l.explainLoss("a", 9, 0); !strings.Contains(got, "unknown") {
		t.Errorf("without its sequence: %s", got)
	}
}

// TestSideNamesLostMessages: the side keeps where each message was stored,
// and names the lost ones with it.
func TestSideNamesLostMessages(t *testing.T) {
	s := newSide("x", Config{BodySize: 20}, time.Now(), []string{"a", "b"})
	var delivered [][]byte
	for i := range 4 {
		b, n := s.body(i % 2)
		s.markPosted(n, i%2, uint64(100+i))
		if i != 2 {
			delivered = append(delivered, b)
		}
	}
	for _, b := range delivered {
		s.deliver(b)
	}
	lost, n := s.lostMsgs(10)
	if n != 1 || s.lost() != 1 || len(lost) != 1 {
		t.Fatalf("lost %d (%d), examples %v; want 1", n, s.lost(), lost)
	}
	if m := lost[0]; m.n != 3 || m.idx != 0 || m.seq != 102 {
		t.Errorf("lost %+v, want message 3 of id 0 at sequence 102", m)
	}
}

// FuzzParseOwnerLine: the parent's reader of an owner's stdout never
// panics, and what it accepts is what the owner writes: a delivery line
// written back from its fields parses to the same fields, a ready line
// names its GOMAXPROCS (or none), and anything else is refused.
func FuzzParseOwnerLine(f *testing.F) {
	for _, s := range []string{"d id-3 42 7 1001 123456789 223456789", "r", "r 2", "f lease_watchdog_fence", "", "x", "r x", "d a b", "d  1 2 3 4 5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := parseOwnerLine(s)
		if err != nil {
			return
		}
		switch l.kind {
		case 'd':
			back := fmt.Sprintf("d %s %d %d %d %d %d", l.id, l.seq, l.epoch, l.n, l.sent, l.at)
			again, err := parseOwnerLine(back)
			if err != nil || again != l {
				t.Fatalf("%q parsed as %+v; written back %q parses as %+v, %v", s, l, back, again, err)
			}
		case 'r':
			want := "r"
			if s != "r" {
				want = "r " + strconv.FormatUint(l.n, 10)
			}
			if again, err := parseOwnerLine(want); err != nil || again != l {
				t.Fatalf("%q parsed as %+v; %q parses as %+v, %v", s, l, want, again, err)
			}
		case 'f':
			want := strings.TrimPrefix(s, "f ")
			if s == "f" {
				want = ""
			}
			if l.text != want {
				t.Fatalf("%q: cause %q, want %q", s, l.text, want)
			}
		default:
			t.Fatalf("%q accepted as kind %q", s, l.kind)
		}
	})
}

// shardIDs are two ids of one shard of a world of n shards, one of another
// shard, and the first shard.
func shardIDs(t *testing.T, n int) (a, b, other string, q int) {
	t.Helper()
	byShard := map[int][]string{}
	for i := 0; i < 1000; i++ {
		id := "id-" + strconv.Itoa(i)
		s := wire.ShardOf(id, n)
		byShard[s] = append(byShard[s], id)
		if len(byShard[s]) == 2 {
			for s2, ids := range byShard {
				if s2 != s {
					return byShard[s][0], byShard[s][1], ids[0], s
				}
			}
		}
	}
	t.Fatal("no two ids share a shard")
	return
}

// TestLedgerShardCommits feeds the ledger of a sharded world synthetic
// histories in broker order: a shard cursor that newly covers a message
// delivered only under an older epoch, or never delivered, is a stale
// commit (the second is also explained as a loss); a takeover whose new
// holder delivers what it commits passes, and so do exceptions for a
// pending id.
func TestLedgerShardCommits(t *testing.T) {
	const n = 4
	a, b, other, q := shardIDs(t, n)
	unit := wire.ShardUnit(q)
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	ns := func(d time.Duration) int64 { return at(d).UnixNano() }
	ms := time.Millisecond
	cur := func(seq uint64) wire.ShardCursor { return wire.ShardCursor{Seq: seq} }
	// start: epoch 1 holds the shard; a posts 10 and 12, b 11 and 13; other
	// (another shard) posts 14. Epoch 1 delivers 10 and 11 and commits 11.
	start := func() *ledger {
		l := newShardLedger("w", n)
		for id, seqs := range map[string][]uint64{a: {10, 12}, b: {11, 13}, other: {14}} {
			for _, s := range seqs {
				l.posted(id, s)
			}
		}
		l.record(unit, recState{epoch: 1, node: "n1", held: true}, t0)
		l.delivery(a, 10, 1, ns(ms), true)
		l.delivery(b, 11, 1, ns(2*ms), true)
		l.shardCursorWrite(q, cur(11), at(3*ms))
		return l
	}
	check := func(t *testing.T, l *ledger, commits, stale int64) verdict {
		t.Helper()
		v, err := l.check()
		if err != nil {
			t.Fatal(err)
		}
		if v.commits != commits || v.staleCommits != stale {
			t.Errorf("%d commits, %d stale; want %d and %d: %v", v.commits, v.staleCommits, commits, stale, v.staleCommitExamples)
		}
		return v
	}

	t.Run("takeover", func(t *testing.T) {
		l := start()
		// Epoch 1 delivers 12 (not committed); n2 takes over at epoch 2
		// and delivers 12 and 13 again, then commits 13.
		l.delivery(a, 12, 1, ns(4*ms), true)
		l.record(unit, recState{epoch: 2, node: "n2", held: true}, at(5*ms))
		l.delivery(a, 12, 2, ns(6*ms), true)
		l.delivery(b, 13, 2, ns(7*ms), true)
		l.shardCursorWrite(q, cur(13), at(8*ms))
		// A write that changes nothing is no commit.
		l.shardCursorWrite(q, cur(13), at(9*ms))
		check(t, l, 2, 0)
		if v, _ := l.check(); v.takeoverIDs != 1 {
			t.Errorf("%d units taken over, want 1", v.takeoverIDs)
		}
	})

	t.Run("delivered only under an older epoch", func(t *testing.T) {
		l := start()
		l.delivery(a, 12, 1, ns(4*ms), true)
		l.delivery(b, 13, 1, ns(4*ms), true)
		l.record(unit, recState{epoch: 2, node: "n2", held: true}, at(5*ms))
		// A broken fence lets n1's commit of 13 through under epoch 2's
		// record: 12 and 13 were delivered under epoch 1 only.
		l.shardCursorWrite(q, cur(13), at(6*ms))
		v := check(t, l, 2, 1)
		if len(v.staleCommitExamples) != 1 || !strings.Contains(v.staleCommitExamples[0], "covers 2 message(s)") {
			t.Errorf("examples %q", v.staleCommitExamples)
		}
		// n2 delivers them afterwards: too late to excuse that commit.
		l.delivery(a, 12, 2, ns(10*ms), true)
		l.delivery(b, 13, 2, ns(10*ms), true)
		check(t, l, 2, 1)
	})

	t.Run("never delivered", func(t *testing.T) {
		l := start()
		// The holder commits past 12 and 13, having delivered 12 only.
		l.delivery(a, 12, 1, ns(4*ms), true)
		l.shardCursorWrite(q, cur(13), at(5*ms))
		v := check(t, l, 2, 1)
		if len(v.staleCommitExamples) != 1 || !strings.Contains(v.staleCommitExamples[0], "never delivered") {
			t.Errorf("examples %q", v.staleCommitExamples)
		}
		if why := l.explainLoss(b, 4, 13); !strings.Contains(why, "committed without a delivery") || !strings.Contains(why, "from 11 to 13") {
			t.Errorf("explained as %q", why)
		}
	})

	t.Run("delivered after the commit", func(t *testing.T) {
		l := start()
		l.shardCursorWrite(q, cur(12), at(4*ms))
		l.delivery(a, 12, 1, ns(4*ms)+int64(clockTolerance)+1, true)
		check(t, l, 2, 1)
	})

	t.Run("released record", func(t *testing.T) {
		l := start()
		l.delivery(a, 12, 1, ns(4*ms), true)
		l.record(unit, recState{epoch: 1, node: "n1", held: false}, at(5*ms))
		l.shardCursorWrite(q, cur(12), at(6*ms))
		check(t, l, 2, 1)
	})

	t.Run("pending id", func(t *testing.T) {
		l := start()
		// b fails at 13: the cursor passes 13 excepting b from 13, having
		// delivered a's 12. Then b's 13 is delivered and the exception
		// goes: that write newly covers 13, delivered: legitimate.
		l.delivery(a, 12, 1, ns(4*ms), true)
		l.delivery(b, 13, 1, ns(4*ms), true) // failed
		pend := wire.ShardCursor{Seq: 13, Pending: map[string]wire.PendingID{wire.EncodeID(b): {Seq: 13, Failures: 1, Error: "x"}}}
		l.shardCursorWrite(q, pend, at(5*ms))
		l.delivery(b, 13, 1, ns(6*ms), true)
		l.shardCursorWrite(q, cur(13), at(7*ms))
		check(t, l, 3, 0)
	})

	t.Run("pending id never delivered again", func(t *testing.T) {
		// The exception of b from 11 is dropped while 11 was delivered
		// under epoch 1 only, and the record is at epoch 2 since.
		pend := wire.ShardCursor{Seq: 11, Pending: map[string]wire.PendingID{wire.EncodeID(b): {Seq: 11, Failures: 1, Error: "x"}}}
		l := newShardLedger("w", n)
		l.posted(a, 10)
		l.posted(b, 11)
		l.record(unit, recState{epoch: 1, node: "n1", held: true}, t0)
		l.delivery(a, 10, 1, ns(ms), true)
		l.delivery(b, 11, 1, ns(ms), true) // failed
		l.shardCursorWrite(q, pend, at(2*ms))
		l.record(unit, recState{epoch: 2, node: "n2", held: true}, at(3*ms))
		l.shardCursorWrite(q, cur(11), at(4*ms))
		check(t, l, 2, 1)
	})

	t.Run("other shards unaffected", func(t *testing.T) {
		l := start()
		// other's shard is never committed: nothing of it is checked, and
		// its message is explained as removed without a commit.
		check(t, l, 1, 0)
		if why := l.explainLoss(other, 5, 14); !strings.Contains(why, "removed with no commit covering it") {
			t.Errorf("explained as %q", why)
		}
	})
}

// TestLedger_UnrecordedPosts: a sharded world's check of commits knows
// only the posts the ledger recorded; an acknowledged message it has no
// post for is counted, so that the run fails instead of passing over it.
func TestLedger_UnrecordedPosts(t *testing.T) {
	l := newShardLedger("w", 4)
	l.posted("a", 1)
	l.posted("b", 2)
	l.posted("a", 2) // a resent post: the same message
	if n := l.unrecordedPosts([]uint64{1, 2}); n != 0 {
		t.Errorf("%d unrecorded, want 0", n)
	}
	if n := l.unrecordedPosts([]uint64{1, 2, 3, 4}); n != 2 {
		t.Errorf("%d unrecorded, want 2 (3 and 4)", n)
	}
	if n := newLedger("w").unrecordedPosts([]uint64{1}); n != 0 {
		t.Errorf("a per-id ledger: %d unrecorded, want 0 (it checks cursors, not posts)", n)
	}
}
