package drain_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/fencing"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// mailboxMsgs reads id's stored messages after seq after, as a worker's
// consumer would have carried them.
func mailboxMsgs(t *testing.T, ctx context.Context, w *client.World, id string, after uint64) []*jetstream.RawStreamMsg {
	t.Helper()
	var out []*jetstream.RawStreamMsg
	for seq := after + 1; ; {
		m, err := handles.Of(w).Mailbox.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(wire.MailboxSubject(w.Name, id)))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return out
		}
		require.NoError(t, err)
		out = append(out, m)
		seq = m.Sequence + 1
	}
}

// holdX starts a server and a world (with opts on its drainer), opens a
// session of node n1 and holds id "x" through it.
func holdX(t *testing.T, opts ...drain.Option) (context.Context, *client.World, *drain.Drainer, *ownership.Session, *ownership.Lease, *drain.Holding) {
	t.Helper()
	env := testutil.Start(t, testutil.Target{Name: "single"})
	ctx := testutil.Ctx(t, time.Minute)
	w, d := newWorld(t, env, world.Config{}, opts...)
	ss, err := w.Ownership.OpenSession(ctx, "n1", time.Minute)
	require.NoError(t, err)
	l, err := ss.Claim(ctx, "x")
	require.NoError(t, err)
	h, err := d.Hold(l)
	require.NoError(t, err)
	return ctx, w, d, ss, l, h
}

// TestHolding_Deliver: messages read elsewhere are handed out only once
// the holding is live (a drain read its mailbox to the end); in order,
// skipping what the cursor covers; the commit goes out without waiting and
// is settled by the next call or Flush; a seize makes the settle fail
// with the ownership outcome, and the new holder gets every message whose
// commit did not land.
func TestHolding_Deliver(t *testing.T) {
	ctx, w, d, ss, _, h := holdX(t)
	defer ss.Close()
	var err error
	var rec testutil.Recorder

	send(t, ctx, w, "x", "1", "2")
	early := mailboxMsgs(t, ctx, w, "x", 0)
	_, ok, err := h.Deliver(ctx, early, rec.Handle)
	require.NoError(t, err)
	require.False(t, ok, "Deliver before any drain")
	require.Empty(t, rec.Bodies())
	require.False(t, h.Live())

	res, err := h.Drain(ctx, rec.Handle)
	require.NoError(t, err)
	require.Equal(t, 2, res.Count)
	require.True(t, h.Live(), "a drain that read to the end makes the holding live")

	send(t, ctx, w, "x", "3", "4")
	// The caller's read overlaps what the drain delivered: skipped.
	all := mailboxMsgs(t, ctx, w, "x", 0)
	require.Len(t, all, 4)
	before := bucketLastSeq(t, w)
	res, ok, err = h.Deliver(ctx, all, rec.Handle)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, 2, res.Count)
	require.Equal(t, []string{"1", "2", "3", "4"}, rec.Bodies())
	require.NoError(t, h.Flush(ctx))
	require.Equal(t, uint64(1), bucketLastSeq(t, w)-before, "one cursor write")
	st, err := w.Mailboxes.Stat(ctx, "x")
	require.NoError(t, err)
	require.Equal(t, all[3].Sequence, st.Cursor, "the commit sent without waiting is stored")
	require.Zero(t, st.Depth)

	// A commit in flight when the id is seized: the settle fails with the
	// ownership outcome and the new holder gets those messages again.
	send(t, ctx, w, "x", "5")
	_, ok, err = h.Deliver(ctx, mailboxMsgs(t, ctx, w, "x", all[3].Sequence), rec.Handle)
	require.NoError(t, err)
	require.True(t, ok)
	seized, err := w.Ownership.Seize(ctx, "x", "n2", time.Minute, true)
	require.NoError(t, err)
	err = h.Flush(ctx)
	if err != nil {
		// The commit was refused: the record moved before it landed.
		require.ErrorIs(t, err, ownership.ErrHeld)
	}
	send(t, ctx, w, "x", "6")
	var stale testutil.Recorder
	_, ok, err = h.Deliver(ctx, mailboxMsgs(t, ctx, w, "x", 0), stale.Handle)
	require.True(t, err != nil || !ok, "a seized holding takes messages")
	_, err = h.Drain(ctx, stale.Handle)
	require.ErrorIs(t, err, ownership.ErrHeld)
	require.Empty(t, stale.Bodies(), "a seized holding delivered")
	var next testutil.Recorder
	_, err = d.DrainLease(ctx, seized, next.Handle)
	require.NoError(t, err)
	got := next.Bodies()
	require.Equal(t, "6", got[len(got)-1])
	require.Subset(t, []string{"5", "6"}, got, "at least the messages whose commit did not land, in order")
}

// TestHolding_DeliverFailure: a failed delivery ends liveness (the next
// delivery is a drain, which retries it after its backoff) and nothing is
// skipped.
func TestHolding_DeliverFailure(t *testing.T) {
	ctx, w, _, ss, _, h := holdX(t, drain.WithBackoff(time.Millisecond, time.Millisecond))
	defer ss.Close()
	var err error
	_, err = h.Drain(ctx, func(context.Context, drain.Message) error { return nil })
	require.NoError(t, err)
	require.True(t, h.Live())

	send(t, ctx, w, "x", "a", "b")
	failOnce := true
	var rec testutil.Recorder
	rec.Fail = func(m drain.Message) error {
		if string(m.Body) == "b" && failOnce {
			failOnce = false
			return errors.New("not now")
		}
		return nil
	}
	_, ok, err := h.Deliver(ctx, mailboxMsgs(t, ctx, w, "x", 0), rec.Handle)
	require.NoError(t, err)
	require.True(t, ok)
	require.False(t, h.Live(), "a failed delivery ends liveness")
	_, ok, err = h.Deliver(ctx, mailboxMsgs(t, ctx, w, "x", 0), rec.Handle)
	require.NoError(t, err)
	require.False(t, ok)
	_, err = h.Drain(ctx, rec.Handle)
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b", "b"}, rec.Bodies())
	require.True(t, h.Live())
}

// TestHolding_DeliverFailureCounted: a message whose
// delivery fails as the first after a settled commit (the failure count
// is written at the cursor's own sequence) is counted on: the holding's
// next drain hands it out as delivery 2, and a message that always fails
// gets exactly max_deliveries calls, counted 1, 2, 3..., then one dead
// letter. The holding kept its old cursor, and counted from 1 again.
func TestHolding_DeliverFailureCounted(t *testing.T) {
	ctx, w, _, ss, _, h := holdX(t, drain.WithBackoff(time.Millisecond, time.Millisecond))
	defer ss.Close()
	var rec testutil.Recorder
	rec.Fail = func(m drain.Message) error {
		if string(m.Body) == "bad" {
			return errors.New("bad")
		}
		return nil
	}
	send(t, ctx, w, "x", "ok")
	_, err := h.Drain(ctx, rec.Handle)
	require.NoError(t, err)
	require.NoError(t, h.Flush(ctx)) // nothing in flight: the cursor is at "ok"
	require.True(t, h.Live())

	send(t, ctx, w, "x", "bad")
	msgs := mailboxMsgs(t, ctx, w, "x", 0)
	_, ok, err := h.Deliver(ctx, msgs[len(msgs)-1:], rec.Handle)
	require.NoError(t, err)
	require.True(t, ok)
	require.False(t, h.Live(), "a failed delivery ends liveness")
	res, err := h.Drain(ctx, rec.Handle)
	require.NoError(t, err)
	require.Equal(t, 1, res.DeadLettered)
	var deliveries []int
	for _, m := range rec.Msgs()[1:] {
		deliveries = append(deliveries, m.Delivery)
	}
	require.Equal(t, []int{1, 2, 3, 4, 5}, deliveries, "max_deliveries calls, counted on")
	dl, err := w.Mailboxes.DeadLetters(ctx, "x", 10)
	require.NoError(t, err)
	require.Len(t, dl, 1)
}

// sweepFeed feeds sw every mailbox message from the first, as a worker's
// consumer does, until ctx ends.
func sweepFeed(t *testing.T, ctx context.Context, w *client.World, sw *drain.Sweeper) {
	t.Helper()
	cons, err := handles.Of(w).Mailbox.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{wire.MailboxFilter(w.Name)}, DeliverPolicy: jetstream.DeliverAllPolicy, HeadersOnly: true,
	})
	require.NoError(t, err)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		meta, err := m.Metadata()
		if err != nil {
			return
		}
		id, err := wire.MailboxID(w.Name, m.Subject())
		if err != nil {
			id = "" // no id's mailbox holds it
		}
		sw.SawID(meta.Sequence.Stream, id)
	})
	require.NoError(t, err)
	t.Cleanup(cc.Stop)
}

// TestSweeper: one purge removes the committed messages of every id below
// the first message that no stored cursor covers, and nothing else: an
// undrained id's messages stay, and so do committed messages after them,
// until that id is drained too; a cursor above the stream's last sequence
// (written by no commit) purges nothing.
func TestSweeper(t *testing.T) {
	env := testutil.Start(t, testutil.Target{Name: "single"})
	ctx := testutil.Ctx(t, time.Minute)
	// The server purges this world: the drains below purge nothing
	// themselves, so what goes, the sweeper removed.
	w, d := newWorld(t, env, world.Config{Purge: world.PurgeByServer})
	sw := d.NewSweeper()
	sweepFeed(t, ctx, w, sw)
	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = sw.Run(rctx, 20*time.Millisecond) })
	defer func() { stop(); wg.Wait() }()

	// Interleaved: a1 b1 c1 a2 b2 c2 ...; c is never drained at first.
	for i := range 5 {
		for _, id := range []string{"a", "b", "c"} {
			send(t, ctx, w, id, fmt.Sprintf("%s%d", id, i))
		}
	}
	// A forged cursor for c, far above the last sequence: nothing purged.
	_, err := handles.Of(w).KV.Put(ctx, wire.CursorKey("c"), []byte(`{"v":1,"seq":1000000}`))
	require.NoError(t, err)
	drainAll := func(id string) {
		l, err := w.Ownership.Claim(ctx, id, "n-"+id, time.Minute)
		require.NoError(t, err)
		_, err = d.DrainLease(ctx, l, func(context.Context, drain.Message) error { return nil })
		require.NoError(t, err)
		require.NoError(t, w.Ownership.Release(ctx, id, "n-"+id))
	}
	drainAll("a")
	drainAll("b")
	stored := func() uint64 {
		info, err := handles.Of(w).Mailbox.Info(ctx)
		require.NoError(t, err)
		return info.State.Msgs
	}
	// c0 at sequence 3 holds the mark: a0 and b0 (1, 2) go, the rest stay.
	testutil.WaitFor(t, 10*time.Second, "the sweep up to c0", func() bool { return sw.Swept() == 3 })
	// Unread: a and b are committed to their last message, c is not (its
	// forged cursor is not taken), an id never seen has nothing waiting.
	testutil.WaitFor(t, 10*time.Second, "a's and b's commits followed", func() bool { return !sw.Unread("a") && !sw.Unread("b") })
	require.True(t, sw.Unread("c"))
	require.False(t, sw.Unread("never-posted"))
	require.Equal(t, uint64(13), stored())
	// A window of ten more sweeps for the mark to pass c0 (it must not).
	time.Sleep(200 * time.Millisecond)
	require.Equal(t, uint64(3), sw.Swept())
	require.Len(t, mailboxMsgs(t, ctx, w, "c", 0), 5, "the forged cursor purged nothing")

	// Repair c's cursor and drain it: everything goes.
	require.NoError(t, handles.Of(w).KV.Delete(ctx, wire.CursorKey("c")))
	var rec testutil.Recorder
	l, err := w.Ownership.Claim(ctx, "c", "n-c", time.Minute)
	require.NoError(t, err)
	_, err = d.DrainLease(ctx, l, rec.Handle)
	require.NoError(t, err)
	require.Equal(t, []string{"c0", "c1", "c2", "c3", "c4"}, rec.Bodies())
	// The sweep notes its mark once the purge was answered: wait for both.
	testutil.WaitFor(t, 10*time.Second, "the sweep of everything", func() bool { return stored() == 0 && sw.Swept() == 16 })
}

// TestSweeper_Missed: a message the caller's consumer delivered without
// its sequence (Missed) was not seen, so no sweep may pass it: here b0
// lies between two committed messages of a, and a sweep below the last
// one seen would purge it though nothing committed it (the control, a
// sweeper fed the same without the miss, does). After Missed the sweeper
// purges nothing, and Unread says every id may have mail.
func TestSweeper_Missed(t *testing.T) {
	env := testutil.Start(t, testutil.Target{Name: "single"})
	ctx := testutil.Ctx(t, time.Minute)
	w, d := newWorld(t, env, world.Config{Purge: world.PurgeByServer})
	send(t, ctx, w, "a", "a0")
	send(t, ctx, w, "b", "b0")
	send(t, ctx, w, "a", "a1")
	l, err := w.Ownership.Claim(ctx, "a", "n-a", time.Minute)
	require.NoError(t, err)
	var rec testutil.Recorder
	_, err = d.DrainLease(ctx, l, rec.Handle)
	require.NoError(t, err)
	require.Equal(t, []string{"a0", "a1"}, rec.Bodies())

	// A consumer's view: a0 at 1, b0 at 2 without its sequence, a1 at 3.
	following := func(missed bool) *drain.Sweeper {
		sw := d.NewSweeper()
		sw.SawID(1, "a")
		if missed {
			sw.Missed()
		}
		sw.SawID(3, "a")
		rctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Go(func() { _ = sw.Run(rctx, time.Hour) }) // its cursor watch; sweeps by SweepNow
		t.Cleanup(func() { stop(); wg.Wait() })
		testutil.WaitFor(t, 10*time.Second, "a's cursor followed", func() bool { return drain.SweeperCursor(sw, "a") == 3 })
		return sw
	}
	sw := following(true)
	drain.SweepNow(ctx, sw)
	require.Zero(t, sw.Swept())
	require.Len(t, mailboxMsgs(t, ctx, w, "b", 0), 1, "b0 is kept")
	require.True(t, sw.Unread("a"), "after a miss every id may have mail")

	control := following(false)
	require.False(t, control.Unread("a"))
	drain.SweepNow(ctx, control)
	require.Equal(t, uint64(4), control.Swept())
	require.Empty(t, mailboxMsgs(t, ctx, w, "b", 0), "the control's sweep took b0 with a's messages")
}

// TestHolding_PurgesWhatAnEarlierHolderLeft: messages an earlier holder
// committed and did not purge (its process died before its purge ran) are
// purged after the next holder's first drain, though it commits nothing.
func TestHolding_PurgesWhatAnEarlierHolderLeft(t *testing.T) {
	env := testutil.Start(t, testutil.Target{Name: "single"})
	ctx := testutil.Ctx(t, time.Minute)
	w, d1 := newWorld(t, env, world.Config{})
	// A sweeper that never runs: d1's holdings leave their purges to it
	// for sweepGrace (30 s), longer than this test.
	d1.NewSweeper()
	ss1, err := w.Ownership.OpenSession(ctx, "n1", time.Minute)
	require.NoError(t, err)
	l1, err := ss1.Claim(ctx, "x")
	require.NoError(t, err)
	h1, err := d1.Hold(l1)
	require.NoError(t, err)
	send(t, ctx, w, "x", "1", "2", "3")
	res, err := h1.Drain(ctx, func(context.Context, drain.Message) error { return nil })
	require.NoError(t, err)
	require.Equal(t, 3, res.Count)
	subj := wire.MailboxSubject(w.Name, "x")
	require.Equal(t, uint64(3), stored(t, w, subj), "committed, not purged yet")
	require.NoError(t, ss1.Close())

	d2, err := drain.New(w.World, w.Ownership)
	require.NoError(t, err)
	ss2, err := w.Ownership.OpenSession(ctx, "n2", time.Minute)
	require.NoError(t, err)
	defer ss2.Close()
	l2, err := ss2.Claim(ctx, "x")
	require.NoError(t, err)
	h2, err := d2.Hold(l2)
	require.NoError(t, err)
	var rec testutil.Recorder
	res, err = h2.Drain(ctx, rec.Handle)
	require.NoError(t, err)
	require.Zero(t, res.Count)
	require.Empty(t, rec.Bodies())
	testutil.WaitFor(t, 10*time.Second, "the purge of what n1 committed", func() bool { return stored(t, w, subj) == 0 })
}

// TestHolding_CommitsCoalesced: a delivery's commit goes out at once when
// no commit of the id is in flight, else it is owed and goes with the
// next (group commit), due at the latest a linger after the last delivery
// (FlushBy); Flush writes what is owed. So there are at most as many
// cursor writes as deliveries, every delivered message ends up committed,
// and a crash before a flush delivers again at most what was owed.
func TestHolding_CommitsCoalesced(t *testing.T) {
	ctx, w, d, ss, _, h := holdX(t, drain.WithCommitEvery(100, time.Hour))
	var err error
	_, err = h.Drain(ctx, func(context.Context, drain.Message) error { return nil })
	require.NoError(t, err)
	require.True(t, h.FlushBy().IsZero(), "owes nothing")

	var rec testutil.Recorder
	deliver := func(body string) {
		t.Helper()
		send(t, ctx, w, "x", body)
		all := mailboxMsgs(t, ctx, w, "x", 0)
		_, ok, err := h.Deliver(ctx, all[len(all)-1:], rec.Handle)
		require.NoError(t, err)
		require.True(t, ok)
		// Sent, or owed and due a moment after this delivery (the linger),
		// not after the hour of WithCommitEvery's interval.
		if by := h.FlushBy(); !by.IsZero() {
			require.WithinDuration(t, time.Now(), by, time.Second)
		}
	}
	before := bucketLastSeq(t, w)
	for _, b := range []string{"a", "b", "c", "e", "f"} {
		deliver(b)
	}
	require.NoError(t, h.Flush(ctx))
	require.True(t, h.FlushBy().IsZero())
	writes := bucketLastSeq(t, w) - before
	require.True(t, writes >= 1 && writes <= 5, "%d cursor writes for 5 deliveries", writes)
	st, err := w.Mailboxes.Stat(ctx, "x")
	require.NoError(t, err)
	require.Zero(t, st.Depth, "every delivered message committed after Flush")

	deliver("g")
	// The process dies without a flush: its session lapses. The next
	// holder gets g again if its commit had not gone out, nothing else.
	ss.Orphan()
	l2, err := w.Ownership.Seize(ctx, "x", "n2", time.Minute, true)
	require.NoError(t, err)
	var next testutil.Recorder
	_, err = d.DrainLease(ctx, l2, next.Handle)
	require.NoError(t, err)
	require.Subset(t, []string{"g"}, next.Bodies())
	require.Equal(t, []string{"a", "b", "c", "e", "f", "g"}, rec.Bodies())
}

// TestHolding_CursorNeverBack: a delivery that fails while the previous
// delivery's commit is in flight writes its failure count at or after that
// commit's cursor, never before it (the soak caught a holder moving its
// own cursor back this way).
func TestHolding_CursorNeverBack(t *testing.T) {
	var mu sync.Mutex
	var commits []drain.Commit
	ctx, w, _, ss, _, h := holdX(t, drain.WithBackoff(time.Millisecond, time.Millisecond),
		drain.WithCommitObserver(func(c drain.Commit) { mu.Lock(); commits = append(commits, c); mu.Unlock() }))
	defer ss.Close()
	_, err := h.Drain(ctx, func(context.Context, drain.Message) error { return nil })
	require.NoError(t, err)

	send(t, ctx, w, "x", "a", "b")
	msgs := mailboxMsgs(t, ctx, w, "x", 0)
	ok := func(context.Context, drain.Message) error { return nil }
	fail := func(context.Context, drain.Message) error { return errors.New("not now") }
	_, _, err = h.Deliver(ctx, msgs[:1], ok) // a's commit goes out, not waited for
	require.NoError(t, err)
	_, _, err = h.Deliver(ctx, msgs[1:], fail) // b fails at once: its count is written
	require.NoError(t, err)
	require.NoError(t, h.Flush(ctx))

	mu.Lock()
	defer mu.Unlock()
	slices.SortFunc(commits, func(a, b drain.Commit) int { return cmp.Compare(a.StreamSeq, b.StreamSeq) })
	require.NotEmpty(t, commits)
	for i := 1; i < len(commits); i++ {
		require.GreaterOrEqual(t, commits[i].Cursor, commits[i-1].Cursor, "cursor moved back: %+v", commits)
	}
	st, err := w.Mailboxes.Stat(ctx, "x")
	require.NoError(t, err)
	require.Equal(t, msgs[0].Sequence, st.Cursor, "a committed, b waiting for its next delivery")
}

// TestHolding_UnknownCommitFencedOut: after a commit whose outcome is
// unknown, the holding's next run rewrites the record before it reads the
// cursor, so that the commit, if it was still on its way (a proxy's
// buffer, a client's resend after "no responders"), is refused and cannot
// move the cursor back behind the run's. The lost answer is simulated
// (ForgetCommitOutcome); the late commit is a real fenced write.
func TestHolding_UnknownCommitFencedOut(t *testing.T) {
	ctx, w, _, ss, l, h := holdX(t)
	defer ss.Close()
	var err error
	send(t, ctx, w, "x", "a", "b")
	var rec testutil.Recorder
	_, err = h.Drain(ctx, rec.Handle)
	require.NoError(t, err)
	old := drain.FenceRevision(h)

	drain.ForgetCommitOutcome(h)
	send(t, ctx, w, "x", "c")
	_, err = h.Drain(ctx, rec.Handle)
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b", "c"}, rec.Bodies())
	require.Greater(t, drain.FenceRevision(h), old, "the record was rewritten before the cursor was read")

	// The commit of unknown outcome arrives now, with the old fence.
	late := fencing.Fence{World: w.Name, ID: "x", Node: "n1", Epoch: l.Epoch, Revision: old}
	_, err = handles.Of(w).JS.Publish(ctx, wire.KeySubject(w.Name, wire.CursorKey("x")), []byte(`{"v":1,"seq":1}`), late.Expect())
	require.Error(t, err, "a commit fenced before the rewrite was stored")
	st, err := w.Mailboxes.Stat(ctx, "x")
	require.NoError(t, err)
	require.Equal(t, rec.Msgs()[2].Seq, st.Cursor, "the cursor moved back")
}

// TestHolding_LaterCursorKept: a commit within a batch stores a later
// cursor while the previous delivery's commit is still in flight; when that
// one is answered the holding keeps the later cursor, so that its next
// drain does not read from the older one and deliver (and commit) again
// what the later one covers (the soak caught cursors moving back this way).
func TestHolding_LaterCursorKept(t *testing.T) {
	var mu sync.Mutex
	var commits []drain.Commit
	ctx, w, _, ss, _, h := holdX(t, drain.WithCommitEvery(2, time.Hour),
		drain.WithCommitObserver(func(c drain.Commit) { mu.Lock(); commits = append(commits, c); mu.Unlock() }))
	defer ss.Close()
	var rec testutil.Recorder
	_, err := h.Drain(ctx, rec.Handle)
	require.NoError(t, err)

	send(t, ctx, w, "x", "a", "b", "c")
	msgs := mailboxMsgs(t, ctx, w, "x", 0)
	_, _, err = h.Deliver(ctx, msgs[:1], rec.Handle) // a: sent, not waited for
	require.NoError(t, err)
	_, _, err = h.Deliver(ctx, msgs[1:], rec.Handle) // b, c: due at c, written at once
	require.NoError(t, err)
	send(t, ctx, w, "x", "d")
	_, err = h.Drain(ctx, rec.Handle) // settles a's commit, then reads after c
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b", "c", "d"}, rec.Bodies(), "delivered again after an older cursor")

	mu.Lock()
	defer mu.Unlock()
	slices.SortFunc(commits, func(a, b drain.Commit) int { return cmp.Compare(a.StreamSeq, b.StreamSeq) })
	for i := 1; i < len(commits); i++ {
		require.GreaterOrEqual(t, commits[i].Cursor, commits[i-1].Cursor, "cursor moved back: %+v", commits)
	}
}

// TestHolding_FailedDrainEndsLiveness: a worker whose inbox may have missed
// messages drains instead of delivering, and the messages it took from the
// inbox are dropped; if that drain fails before it read anything (here its
// record check: the context is done; in the cluster repro a read whose
// answer was lost with a stopped member), the holding is no longer live,
// so the next batch from the inbox is not handed out over the messages
// dropped before it. Before, a drain that failed in its record check left
// the holding live, and the next Deliver committed past the dropped
// message: the cluster rounds' lost messages (docs/design/pipeline.md point 1).
func TestHolding_FailedDrainEndsLiveness(t *testing.T) {
	ctx, w, _, ss, _, h := holdX(t)
	defer ss.Close()
	var rec testutil.Recorder
	_, err := h.Drain(ctx, rec.Handle)
	require.NoError(t, err)
	require.True(t, h.Live())

	send(t, ctx, w, "x", "dropped", "next")
	msgs := mailboxMsgs(t, ctx, w, "x", 0)
	require.Len(t, msgs, 2)
	done, cancel := context.WithCancel(ctx)
	cancel()
	_, err = h.Drain(done, rec.Handle)
	require.Error(t, err, "a drain with its context done fails")
	require.False(t, h.Live(), "a failed drain leaves the holding not caught up")
	_, ok, err := h.Deliver(ctx, msgs[1:], rec.Handle)
	require.NoError(t, err)
	require.False(t, ok, "handed out past a message the failed drain never read")
	_, err = h.Drain(ctx, rec.Handle)
	require.NoError(t, err)
	require.Equal(t, []string{"dropped", "next"}, rec.Bodies())
}

// TestRedelivered: a holder that dies with messages handed out and not
// committed leaves them to the next holder, who gets them labelled as
// maybe seen (Message.Redelivered), with Delivery still 1 (no failure is
// known); a message posted after the takeover is not labelled.
func TestRedelivered(t *testing.T) {
	env := testutil.Start(t, testutil.Target{Name: "single"})
	ctx := testutil.Ctx(t, time.Minute)
	w, d := newWorld(t, env, world.Config{})
	send(t, ctx, w, "x", "a", "b")
	l, err := w.Ownership.Claim(ctx, "x", "n1", 200*time.Millisecond)
	require.NoError(t, err)
	require.True(t, l.PriorUntil.IsZero())
	// n1 hands out a and stops there, as if it died: nothing committed.
	var first testutil.Recorder
	dctx, die := context.WithCancel(ctx)
	_, err = d.DrainLease(dctx, l, func(hctx context.Context, m drain.Message) error {
		_ = first.Handle(hctx, m)
		die()
		return dctx.Err()
	})
	require.Error(t, err)
	require.Len(t, first.Msgs(), 1, "n1 had a when its lease lapsed")
	require.False(t, first.Msgs()[0].Redelivered)
	testutil.WaitFor(t, 5*time.Second, "n1's lease lapses", func() bool {
		st, err := w.Ownership.Owner(ctx, "x")
		return err == nil && !st.Held
	})
	l2, err := w.Ownership.Claim(ctx, "x", "n2", time.Minute)
	require.NoError(t, err)
	require.False(t, l2.PriorUntil.IsZero())
	testutil.WaitFor(t, 10*time.Second, "past the bound of n1's messages", func() bool { return time.Now().After(l2.PriorUntil) })
	var rec testutil.Recorder
	_, err = d.DrainLease(ctx, l2, rec.Handle)
	require.NoError(t, err)
	// c after n2's first drain: that drain took over n1's drain lock, and
	// labels all it found (maybeseen_test.go); the next finds no lock.
	send(t, ctx, w, "x", "c")
	_, err = d.DrainLease(ctx, l2, rec.Handle)
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b", "c"}, rec.Bodies())
	for _, m := range rec.Msgs() {
		require.Equal(t, 1, m.Delivery, "%s: no failed delivery is known", m.Body)
		require.Equal(t, string(m.Body) != "c", m.Redelivered, "%s: maybe seen by n1 = stored before n2's takeover", m.Body)
	}
}

// TestLeaveToSweeps: a holding leaves its purge to the sweeps while their
// mark moves, and purges its id alone once the mark stopped short of what
// it committed (or never moved) for a whole grace.
func TestLeaveToSweeps(t *testing.T) {
	for _, c := range []struct {
		name                  string
		sweptAt, swept, below uint64
		leave                 bool
	}{
		{"the mark moved, not past the commit yet", 10, 20, 50, true},
		{"the mark stopped short", 20, 20, 50, false},
		{"the mark never moved (no sweep ran)", 0, 0, 50, false},
		{"the sweeps removed it", 10, 50, 50, false},
		{"the sweeps removed more", 10, 80, 50, false},
	} {
		require.Equal(t, c.leave, drain.LeaveToSweeps(c.sweptAt, c.swept, c.below), c.name)
	}
}

// TestRestAfter: a sweeper's next purge waits sweepRest times the length
// of its last one, so that its purges take at most a fifth of its time
// however long each takes (seconds at a million ids with mail).
func TestRestAfter(t *testing.T) {
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	require.Equal(t, start.Add(10*time.Millisecond), drain.RestAfter(start, start.Add(2*time.Millisecond)))
	require.Equal(t, start.Add(15*time.Second), drain.RestAfter(start, start.Add(3*time.Second)))
	require.Equal(t, start, drain.RestAfter(start, start), "a purge that took no time: no rest")
}

// TestHolding_DeliverGap: a message that names its subject's previous
// message (a partitioned world's republished post, wire.HeaderLastSeq)
// is handed out only if the holding has that one or an earlier one, or it
// is in the batch before it; a batch with a gap is not delivered at all
// and the holding drains instead, which hands out every message once and
// in order. Repeats within a batch (the same post through two
// subscriptions) are skipped.
func TestHolding_DeliverGap(t *testing.T) {
	ctx, w, _, ss, _, h := holdX(t)
	defer ss.Close()
	var rec testutil.Recorder
	send(t, ctx, w, "x", "1")
	_, err := h.Drain(ctx, rec.Handle)
	require.NoError(t, err)
	require.True(t, h.Live())
	first := mailboxMsgs(t, ctx, w, "x", 0)[0].Sequence

	// As republished: each message names the one before it.
	send(t, ctx, w, "x", "2", "3", "4")
	msgs := mailboxMsgs(t, ctx, w, "x", first)
	require.Len(t, msgs, 3)
	prev := first
	for _, m := range msgs {
		m.Header.Set(wire.HeaderLastSeq, fmt.Sprint(prev))
		prev = m.Sequence
	}
	// "2" lost: "3" names it, the holding never had it.
	_, ok, err := h.Deliver(ctx, msgs[1:], rec.Handle)
	require.NoError(t, err)
	require.False(t, ok, "a batch after a gap")
	require.False(t, h.Live(), "a gap ends liveness")
	require.Equal(t, []string{"1"}, rec.Bodies(), "nothing of a batch with a gap is handed out")
	_, err = h.Drain(ctx, rec.Handle)
	require.NoError(t, err)
	require.Equal(t, []string{"1", "2", "3", "4"}, rec.Bodies(), "the drain hands out what the gap hid, once")
	require.True(t, h.Live())

	// Contiguous, with repeats (and the messages already handed out): "5"
	// and "6" once, in order.
	send(t, ctx, w, "x", "5", "6")
	more := mailboxMsgs(t, ctx, w, "x", msgs[2].Sequence)
	more[0].Header.Set(wire.HeaderLastSeq, fmt.Sprint(msgs[2].Sequence))
	more[1].Header.Set(wire.HeaderLastSeq, fmt.Sprint(more[0].Sequence))
	batch := []*jetstream.RawStreamMsg{msgs[2], more[0], msgs[2], more[0], more[1], more[0]}
	_, ok, err = h.Deliver(ctx, batch, rec.Handle)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, []string{"1", "2", "3", "4", "5", "6"}, rec.Bodies())
	require.NoError(t, h.Flush(ctx))
}

// TestHolding_StartFromPosts: a holding's first delivery from posts its
// caller kept (a partitioned world's worker, docs/design/partitions.md,
// "The first delivery"), each naming the message of the id stored before it.
// Posts that follow the cursor with none missing are handed out without
// a read of the mailbox; a post missing before them, or between them,
// makes the first delivery a drain from the cursor, which hands out
// every message once, in order.
func TestHolding_StartFromPosts(t *testing.T) {
	ctx, w, d, ss, l, h := holdX(t)
	defer ss.Close()
	var rec testutil.Recorder
	send(t, ctx, w, "x", "1")
	_, err := h.Drain(ctx, rec.Handle)
	require.NoError(t, err)
	require.NoError(t, h.Flush(ctx))

	// named: id x's stored messages after seq after, each naming the one
	// before it as a republished post does.
	named := func(after uint64) []*jetstream.RawStreamMsg {
		msgs := mailboxMsgs(t, ctx, w, "x", after)
		prev := after
		for _, m := range msgs {
			m.Header.Set(wire.HeaderLastSeq, fmt.Sprint(prev))
			prev = m.Sequence
		}
		return msgs
	}
	// next is the holding of x's next claim: Start is a first delivery.
	next := func() *drain.Holding {
		t.Helper()
		require.NoError(t, h.Flush(ctx))
		require.NoError(t, ss.ReleaseHeld(ctx, l))
		l, err = ss.Claim(ctx, "x")
		require.NoError(t, err)
		h, err = d.Hold(l)
		require.NoError(t, err)
		return h
	}
	// mailboxReads counts the reads of the mailbox stream that reach the
	// server (direct gets and leader reads) since it was last called, seen
	// by a connection of the test's own.
	tap := testutil.NewTap(t, handles.Of(w).JS.Conn().ConnectedUrl(), testutil.StreamReads(wire.MailboxStream(w.Name))...)
	mailboxReads := func() int { return tap.Count(t) }
	last := rec.Msgs()[0].Seq // "1", committed (its purge may have run)

	// Every message after the cursor, the first naming the cursor's:
	// handed out, no read of the mailbox, and live.
	send(t, ctx, w, "x", "2", "3")
	msgs := named(last)
	mailboxReads()
	_, err = next().Start(ctx, msgs, rec.Handle)
	require.NoError(t, err)
	require.Equal(t, []string{"1", "2", "3"}, rec.Bodies())
	require.Zero(t, mailboxReads(), "reads of the mailbox for posts that follow the cursor")
	require.True(t, h.Live())
	last = msgs[1].Sequence

	// "4" not kept: "5" names it, and the cursor is before it.
	send(t, ctx, w, "x", "4", "5")
	msgs = named(last)
	_, err = next().Start(ctx, msgs[1:], rec.Handle)
	require.NoError(t, err)
	require.Equal(t, []string{"1", "2", "3", "4", "5"}, rec.Bodies(), "the drain hands out what was not kept, once, in order")
	require.NotZero(t, mailboxReads(), "a drain reads the mailbox")
	require.True(t, h.Live())
	last = msgs[1].Sequence

	// "7" not kept, between "6" and "8".
	send(t, ctx, w, "x", "6", "7", "8")
	msgs = named(last)
	_, err = next().Start(ctx, []*jetstream.RawStreamMsg{msgs[0], msgs[2]}, rec.Handle)
	require.NoError(t, err)
	require.Equal(t, []string{"1", "2", "3", "4", "5", "6", "7", "8"}, rec.Bodies())
	last = msgs[2].Sequence

	// Kept posts the cursor already covers (an earlier holder committed
	// them), then the rest: only the rest, no read.
	send(t, ctx, w, "x", "9")
	msgs = append(msgs, named(last)...)
	mailboxReads()
	_, err = next().Start(ctx, msgs, rec.Handle)
	require.NoError(t, err)
	require.Equal(t, []string{"1", "2", "3", "4", "5", "6", "7", "8", "9"}, rec.Bodies())
	require.Zero(t, mailboxReads())
	require.NoError(t, h.Flush(ctx))
}

// TestHolding_UnansweredCommitBounded: a holding's commit that is never
// answered (sent to a bucket leader that died) is an unknown outcome
// after holdingCommitWait, not the lock path's 10 s: the id's delivery
// waited that long after each bucket leader's death. The next drain
// fences the commit out and delivers again what it covered.
func TestHolding_UnansweredCommitBounded(t *testing.T) {
	ctx, w, _, ss, _, h := holdX(t)
	defer ss.Close()
	var rec testutil.Recorder
	send(t, ctx, w, "x", "a")
	_, err := h.Drain(ctx, rec.Handle)
	require.NoError(t, err)

	send(t, ctx, w, "x", "b")
	msgs := mailboxMsgs(t, ctx, w, "x", storedCursor(t, w, "x"))
	drain.SetCommitFault(h, func(func() (jetstream.PubAckFuture, error)) (jetstream.PubAckFuture, error) {
		return drain.NoAnswer(nil), nil // never sent, never answered
	})
	_, ok, err := h.Deliver(ctx, msgs, rec.Handle)
	require.True(t, ok)
	require.NoError(t, err)
	start := time.Now()
	require.ErrorIs(t, h.Flush(ctx), drain.ErrUnknown)
	waited := time.Since(start)
	require.Less(t, waited, drain.HoldingCommitWait+2*time.Second, "waited %v for an answer that never comes", waited)
	drain.SetCommitFault(h, nil)

	_, err = h.Drain(ctx, rec.Handle)
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b", "b"}, rec.Bodies(), "b delivered again: its commit's outcome is not known")
	require.Equal(t, msgs[0].Sequence, storedCursor(t, w, "x"))
}
