package drain_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/queue"
	"github.com/fencepost/fencepost/server/servertest"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// mailboxCase is one scenario; every case runs on every target, each in a
// fresh world of a deployment shared by the target's cases.
type mailboxCase struct {
	name string
	fn   func(t *testing.T, env *testutil.Env)
}

var mailboxCases = []mailboxCase{
	{"Drain_FourProducersUnownedThenClaimed", testFourProducers},
	{"Drain_FailsTwiceThenSucceeds", testFailsTwice},
	{"Drain_AlwaysFails_DeadLetterAfterMax", testDeadLetter},
	{"Drain_SeizeBeforeCommit_Refused", testSeizeBeforeCommit},
	{"Drain_RenewalBeforeCommit_Retried", testRenewBeforeCommit},
	{"Drain_StaleHolder_ConsumesNothing", testStaleHolder},
	{"Drain_Contended", testContended},
	{"Drain_DeadDrainer_LockRecovered", testDeadDrainer},
	{"Drain_PausedDrainer_FencedAfterTakeover", testPausedDrainer},
	{"Drain_StaleEpochLock_TakenAtOnce", testStaleEpochLock},
	{"Drain_Max", testMax},
	{"Drain_CancelledByCaller", testCancelled},
	{"Drain_DeepMailbox_FailureMidway", testDeepFailure},
	{"Send_Dedupe", testDedupe},
	{"Send_Full_StoresNothing", testFull},
	{"Send_TooLarge", testTooLarge},
}

func TestMailbox(t *testing.T) {
	for _, tg := range testutil.Targets() {
		t.Run(tg.Name, func(t *testing.T) {
			env := testutil.Start(t, tg)
			for _, c := range mailboxCases {
				t.Run(c.name, func(t *testing.T) { c.fn(t, env) })
			}
		})
	}
}

// newWorld makes a fresh world with small message limits (so that the byte
// limit leaves room for many messages) and a drainer with quick backoff.
func newWorld(t *testing.T, env *testutil.Env, cfg world.Config, opts ...drain.Option) (*client.World, *drain.Drainer) {
	t.Helper()
	if cfg.MaxMsgSize == 0 {
		cfg.MaxMsgSize = 8 << 10
	}
	w := env.World(t, cfg)
	d, err := drain.New(w.World, w.Ownership, append([]drain.Option{drain.WithBackoff(time.Millisecond, 10*time.Millisecond)}, opts...)...)
	require.NoError(t, err)
	return w, d
}

// stored is the number of messages on id's mailbox subject (committed ones
// whose purge ran are gone); send posts bodies from "tester".
var (
	stored = testutil.Stored
	send   = testutil.Send
)

func bucketLastSeq(t *testing.T, w *client.World) uint64 {
	t.Helper()
	info, err := handles.Of(w).Bucket.Info(context.Background())
	require.NoError(t, err)
	return info.State.LastSeq
}

func testFourProducers(t *testing.T, env *testutil.Env) {
	ctx := testutil.Ctx(t, 2*time.Minute)
	w, d := newWorld(t, env, world.Config{})
	const id, producers, each = "order.*>/ü 42", 4, 2500
	var wg sync.WaitGroup
	errs := make([]error, producers)
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Windows of 250 in flight per producer.
			for i := 0; i < each; i += 250 {
				pending := make([]*queue.Pending, 0, 250)
				for j := i; j < i+250; j++ {
					pm, err := w.Queue.SendAsync(id, fmt.Appendf(nil, "%d:%d", p, j), queue.WithFrom(fmt.Sprintf("p%d", p)))
					if err != nil {
						errs[p] = err
						return
					}
					pending = append(pending, pm)
				}
				for _, pm := range pending {
					if _, err := pm.Wait(ctx); err != nil {
						errs[p] = err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	lease, err := w.Ownership.Claim(ctx, id, "n1", time.Minute)
	require.NoError(t, err)
	var rec testutil.Recorder
	res, err := d.DrainLease(ctx, lease, rec.Handle)
	require.NoError(t, err)
	require.Equal(t, producers*each, res.Count)
	require.Equal(t, producers*each, res.Acked)

	next := make([]int, producers)
	var lastSeq uint64
	for _, m := range rec.Msgs() {
		require.Greater(t, m.Seq, lastSeq, "stream order")
		lastSeq = m.Seq
		parts := strings.Split(string(m.Body), ":")
		p, _ := strconv.Atoi(parts[0])
		i, _ := strconv.Atoi(parts[1])
		require.Equal(t, next[p], i, "producer %d order", p)
		require.Equal(t, fmt.Sprintf("p%d", p), m.From)
		require.Equal(t, 1, m.Delivery)
		require.Equal(t, lease.Epoch, m.Fence.Epoch)
		require.Equal(t, "n1", m.Fence.Node)
		next[p]++
	}
	for p := range producers {
		require.Equal(t, each, next[p])
	}
	require.Zero(t, stored(t, w, wire.MailboxSubject(w.Name, id)), "mailbox empty")
	st, err := w.Mailboxes.Stat(ctx, id)
	require.NoError(t, err)
	require.Zero(t, st.Depth)
	require.Equal(t, lastSeq, st.Cursor)
}

func testFailsTwice(t *testing.T, env *testutil.Env) {
	ctx := testutil.Ctx(t, time.Minute)
	w, d := newWorld(t, env, world.Config{})
	send(t, ctx, w, "a", "m1", "m2")
	lease, err := w.Ownership.Claim(ctx, "a", "n1", time.Minute)
	require.NoError(t, err)
	rec := testutil.Recorder{Fail: func(m drain.Message) error {
		if string(m.Body) == "m1" && m.Delivery < 3 {
			return errors.New("not yet")
		}
		return nil
	}}
	res, err := d.DrainLease(ctx, lease, rec.Handle)
	require.NoError(t, err)
	require.Equal(t, []string{"m1", "m1", "m1", "m2"}, rec.Bodies())
	for i, want := range []int{1, 2, 3, 1} {
		require.Equal(t, want, rec.Msgs()[i].Delivery)
	}
	require.Equal(t, drain.Result{Count: 2, Acked: 2, Deliveries: 4, Cursor: rec.Msgs()[3].Seq}, res)
	require.Zero(t, stored(t, w, wire.MailboxSubject(w.Name, "a")))

	// Nothing is delivered again.
	var again testutil.Recorder
	res, err = d.DrainLease(ctx, lease, again.Handle)
	require.NoError(t, err)
	require.Zero(t, res.Count)
	require.Empty(t, again.Msgs())
}

func testDeadLetter(t *testing.T, env *testutil.Env) {
	ctx := testutil.Ctx(t, time.Minute)
	w, d := newWorld(t, env, world.Config{})
	send(t, ctx, w, "a", "poison", "fine")
	lease, err := w.Ownership.Claim(ctx, "a", "n1", time.Minute)
	require.NoError(t, err)
	rec := testutil.Recorder{Fail: func(m drain.Message) error {
		if string(m.Body) == "poison" {
			return fmt.Errorf("bad input\r\nline two (delivery %d)", m.Delivery)
		}
		return nil
	}}
	res, err := d.DrainLease(ctx, lease, rec.Handle)
	require.NoError(t, err)
	require.Equal(t, []string{"poison", "poison", "poison", "poison", "poison", "fine"}, rec.Bodies())
	require.Equal(t, 2, res.Count)
	require.Equal(t, 1, res.Acked)
	require.Equal(t, 1, res.DeadLettered)
	require.Zero(t, stored(t, w, wire.MailboxSubject(w.Name, "a")))

	dls, err := w.Mailboxes.DeadLetters(ctx, "a", 0)
	require.NoError(t, err)
	require.Len(t, dls, 1)
	dl := dls[0]
	require.Equal(t, "poison", string(dl.Body))
	require.Equal(t, "tester", dl.From)
	require.Equal(t, 5, dl.Deliveries)
	require.Equal(t, "bad input  line two (delivery 5)", dl.Error)
	require.Equal(t, rec.Msgs()[0].Seq, dl.MailboxSeq)
	require.Equal(t, "n1", dl.Node)
	require.Equal(t, lease.Epoch, dl.Epoch)
	require.False(t, dl.Posted.IsZero())

	// Repost puts it back at the end of the mailbox with a fresh count.
	n, err := w.Mailboxes.Repost(ctx, w.Queue, "a")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	dls, err = w.Mailboxes.DeadLetters(ctx, "a", 0)
	require.NoError(t, err)
	require.Empty(t, dls)
	var back testutil.Recorder
	res, err = d.DrainLease(ctx, lease, back.Handle)
	require.NoError(t, err)
	require.Equal(t, 1, res.Acked)
	require.Equal(t, []string{"poison"}, back.Bodies())
	require.Equal(t, "tester", back.Msgs()[0].From)
	require.Equal(t, 1, back.Msgs()[0].Delivery)

	// Purge drops dead letters.
	send(t, ctx, w, "a", "poison")
	_, err = d.DrainLease(ctx, lease, rec.Handle)
	require.NoError(t, err)
	purged, err := w.Mailboxes.PurgeDeadLetters(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, uint64(1), purged)
	dls, err = w.Mailboxes.DeadLetters(ctx, "a", 0)
	require.NoError(t, err)
	require.Empty(t, dls)
}

// The fence: a seize lands after the old owner's handler returned and
// before its commit. The commit is refused, nothing is removed, and the new
// owner receives the message.
func testSeizeBeforeCommit(t *testing.T, env *testutil.Env) {
	ctx := testutil.Ctx(t, time.Minute)
	w, d := newWorld(t, env, world.Config{})
	send(t, ctx, w, "a", "m1", "m2")
	old, err := w.Ownership.Claim(ctx, "a", "old", time.Minute)
	require.NoError(t, err)
	var once sync.Once
	var seized *ownership.Lease
	drain.SetBeforeCommit(d, func(id string, _ wire.Cursor) {
		once.Do(func() {
			var err error
			seized, err = w.Ownership.Seize(ctx, id, "new", time.Minute, true)
			require.NoError(t, err)
		})
	})
	var rec testutil.Recorder
	res, err := d.DrainLease(ctx, old, rec.Handle)
	var held *ownership.HeldError
	require.ErrorAs(t, err, &held, "got %v", err)
	require.Equal(t, "new", held.Node)
	require.Zero(t, res.Count)
	require.Equal(t, []string{"m1", "m2"}, rec.Bodies(), "delivered once to the old owner")
	require.Equal(t, uint64(2), stored(t, w, wire.MailboxSubject(w.Name, "a")), "nothing removed")

	drain.SetBeforeCommit(d, nil)
	var next testutil.Recorder
	res, err = d.DrainLease(ctx, seized, next.Handle)
	require.NoError(t, err)
	require.Equal(t, 2, res.Count)
	require.Equal(t, []string{"m1", "m2"}, next.Bodies())
	require.Equal(t, "new", next.Msgs()[0].Fence.Node)
	require.Equal(t, seized.Epoch, next.Msgs()[0].Fence.Epoch)
}

// A renewal between the handler and the commit moves the record's revision
// but keeps node and epoch: the commit goes through.
func testRenewBeforeCommit(t *testing.T, env *testutil.Env) {
	ctx := testutil.Ctx(t, time.Minute)
	w, d := newWorld(t, env, world.Config{})
	send(t, ctx, w, "a", "m1", "m2", "m3")
	lease, err := w.Ownership.Claim(ctx, "a", "n1", time.Minute)
	require.NoError(t, err)
	var renewals atomic.Int32
	drain.SetBeforeCommit(d, func(id string, _ wire.Cursor) {
		renewals.Add(1)
		_, err := w.Ownership.Renew(ctx, id, "n1", time.Minute)
		require.NoError(t, err)
	})
	var rec testutil.Recorder
	res, err := d.DrainLease(ctx, lease, rec.Handle, drain.WithMax(3))
	require.NoError(t, err)
	require.Equal(t, 3, res.Count)
	require.Positive(t, renewals.Load())
	require.Zero(t, stored(t, w, wire.MailboxSubject(w.Name, "a")))
}

func testStaleHolder(t *testing.T, env *testutil.Env) {
	ctx := testutil.Ctx(t, time.Minute)
	w, d := newWorld(t, env, world.Config{})
	send(t, ctx, w, "a", "m1")
	subj := wire.MailboxSubject(w.Name, "a")
	never := func(context.Context, drain.Message) error {
		t.Error("a stale holder's handler ran")
		return nil
	}
	check := func(err error, target error) {
		t.Helper()
		before := bucketLastSeq(t, w)
		require.ErrorIs(t, err, target)
		require.Equal(t, before, bucketLastSeq(t, w), "a refused drain writes nothing")
		require.Equal(t, uint64(1), stored(t, w, subj))
	}

	// Never owned.
	_, err := d.Drain(ctx, "a", "n1", 1, never)
	check(err, ownership.ErrFree)

	l1, err := w.Ownership.Claim(ctx, "a", "n1", time.Minute)
	require.NoError(t, err)
	l2, err := w.Ownership.Seize(ctx, "a", "n2", time.Minute, true)
	require.NoError(t, err)
	// n1 at its old epoch: held by n2.
	_, err = d.DrainLease(ctx, l1, never)
	check(err, ownership.ErrHeld)
	// n2 at a wrong epoch: fenced.
	_, err = d.Drain(ctx, "a", "n2", l1.Epoch, never)
	var fenced *ownership.FencedError
	require.ErrorAs(t, err, &fenced)
	require.Equal(t, l2.Epoch, fenced.Current)
	check(err, ownership.ErrFenced)
	// Released: free.
	require.NoError(t, w.Ownership.Release(ctx, "a", "n2"))
	_, err = d.DrainLease(ctx, l2, never)
	check(err, ownership.ErrFree)
}

func testContended(t *testing.T, env *testutil.Env) {
	ctx := testutil.Ctx(t, time.Minute)
	// A short term with a clock bound that leaves its renewals room on a
	// loaded machine: the lock's Term self-fences at term - skew. (With a
	// 300 ms term the first drain's own lock self-fenced once in CI under
	// -race: a renewal not confirmed within 290 ms.)
	const term = time.Second
	w, d := newWorld(t, env, world.Config{}, drain.WithLockTTL(term), drain.WithClockSkew(10*time.Millisecond))
	send(t, ctx, w, "a", "m1", "m2")
	lease, err := w.Ownership.Claim(ctx, "a", "n1", time.Minute)
	require.NoError(t, err)
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	done := make(chan error, 1)
	go func() {
		_, err := d.DrainLease(ctx, lease, func(ctx context.Context, m drain.Message) error {
			once.Do(func() { close(entered) })
			<-release
			return nil
		})
		done <- err
	}()
	<-entered
	// While the first drain runs (its lock renewed well past its term),
	// every second drain is refused.
	deadline := time.Now().Add(term + term/2)
	for time.Now().Before(deadline) {
		_, err := d.DrainLease(ctx, lease, func(context.Context, drain.Message) error {
			t.Error("second drain delivered")
			return nil
		})
		var ce *drain.ContendedError
		require.ErrorAs(t, err, &ce)
		require.Equal(t, "n1", ce.Node)
		time.Sleep(20 * time.Millisecond)
	}
	close(release)
	require.NoError(t, <-done)
	// The lock was released: the next drain runs at once.
	res, err := d.DrainLease(ctx, lease, (&testutil.Recorder{}).Handle)
	require.NoError(t, err)
	require.Zero(t, res.Count)
}

// A drainer that died left its lock: the next drain is refused until the
// lock's term ran out, then takes it over.
func testDeadDrainer(t *testing.T, env *testutil.Env) {
	ctx := testutil.Ctx(t, time.Minute)
	w, d := newWorld(t, env, world.Config{})
	send(t, ctx, w, "a", "m1")
	lease, err := w.Ownership.Claim(ctx, "a", "n1", time.Minute)
	require.NoError(t, err)
	ttl := 200 * time.Millisecond
	dead, err := wire.EncodeLock(wire.Lock{Token: "dead-drainer", Node: "n1", Epoch: lease.Epoch, Expires: time.Now().Add(ttl)})
	require.NoError(t, err)
	_, err = handles.Of(w).KV.Create(ctx, wire.LockKey("a"), dead)
	require.NoError(t, err)

	_, err = d.DrainLease(ctx, lease, (&testutil.Recorder{}).Handle)
	require.ErrorIs(t, err, drain.ErrContended)

	var rec testutil.Recorder
	servertest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		_, err := d.DrainLease(ctx, lease, rec.Handle)
		return err
	})
	require.Equal(t, []string{"m1"}, rec.Bodies())
}

// A lock left by the drain of an older epoch (its owner crashed or was
// seized) is taken over at once by the new holder, however long its term:
// that drain's commits are fenced by the new epoch's write of the record.
// A paused old drain that wakes commits nothing and loses its lock.
func testStaleEpochLock(t *testing.T, env *testutil.Env) {
	ctx := testutil.Ctx(t, time.Minute)
	w, dA := newWorld(t, env, world.Config{}, drain.WithLockTTL(time.Minute))
	dB, err := drain.New(w.World, w.Ownership, drain.WithLockTTL(time.Minute))
	require.NoError(t, err)
	send(t, ctx, w, "a", "m1", "m2")
	old, err := w.Ownership.Claim(ctx, "a", "n1", time.Minute)
	require.NoError(t, err)

	inA, wake := make(chan struct{}), make(chan struct{})
	doneA := make(chan error, 1)
	go func() {
		_, err := dA.DrainLease(ctx, old, func(ctx context.Context, m drain.Message) error {
			close(inA)
			<-wake
			return nil
		}, drain.WithMax(1))
		doneA <- err
	}()
	<-inA // A holds the lock (a minute's term) and is inside its handler
	seized, err := w.Ownership.Seize(ctx, "a", "n2", time.Minute, true)
	require.NoError(t, err)
	var rec testutil.Recorder
	_, err = dB.DrainLease(ctx, seized, rec.Handle)
	require.NoError(t, err, "no wait for the stale drain's lock term")
	require.Equal(t, []string{"m1", "m2"}, rec.Bodies())

	close(wake)
	errA := <-doneA
	require.Error(t, errA, "the stale drain commits nothing")
	st, err := w.Mailboxes.Stat(ctx, "a")
	require.NoError(t, err)
	require.Zero(t, st.Depth)

	// A lock of the current epoch still waits for its term.
	send(t, ctx, w, "a", "m3")
	live, err := wire.EncodeLock(wire.Lock{Token: "other", Node: "n2", Epoch: seized.Epoch, Expires: time.Now().Add(time.Minute)})
	require.NoError(t, err)
	_, err = handles.Of(w).KV.Create(ctx, wire.LockKey("a"), live)
	require.NoError(t, err)
	_, err = dB.DrainLease(ctx, seized, rec.Handle)
	require.ErrorIs(t, err, drain.ErrContended)
}

// The reaper's schedule (docs/design.md 3.5) with a paused holder: drain A stops renewing its lock
// (a GC pause, a partition) in the middle of a handler. Drain B takes the
// lapsed lock over and delivers. When A wakes, its commit is refused by the
// broker, it learns it lost the lock, and removes nothing.
func testPausedDrainer(t *testing.T, env *testutil.Env) {
	ctx := testutil.Ctx(t, time.Minute)
	w, dA := newWorld(t, env, world.Config{}, drain.WithLockTTL(100*time.Millisecond), drain.WithClockSkew(0))
	drain.PauseLockRenewal(dA)
	dB, err := drain.New(w.World, w.Ownership, drain.WithLockTTL(time.Second))
	require.NoError(t, err)
	send(t, ctx, w, "a", "m1", "m2")
	lease, err := w.Ownership.Claim(ctx, "a", "n1", time.Minute)
	require.NoError(t, err)

	inA, wake := make(chan struct{}), make(chan struct{})
	doneA := make(chan error, 1)
	var aSaw atomic.Int32
	go func() {
		_, err := dA.DrainLease(ctx, lease, func(ctx context.Context, m drain.Message) error {
			if aSaw.Add(1) == 1 {
				close(inA)
				<-wake
			}
			return nil
		})
		doneA <- err
	}()
	<-inA
	var rec testutil.Recorder
	servertest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		_, err := dB.DrainLease(ctx, lease, rec.Handle, drain.WithMax(1))
		return err
	})
	require.Equal(t, []string{"m1"}, rec.Bodies())
	cursorAfterB, err := w.Mailboxes.Stat(ctx, "a")
	require.NoError(t, err)

	close(wake)
	err = <-doneA
	var ce *drain.ContendedError
	require.ErrorAs(t, err, &ce, "got %v", err)
	require.True(t, ce.Lost)
	st, err := w.Mailboxes.Stat(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, cursorAfterB.Cursor, st.Cursor, "the paused drain moved nothing")
	require.Equal(t, uint64(1), st.Depth, "m2 still waits")

	var rest testutil.Recorder
	_, err = dB.DrainLease(ctx, lease, rest.Handle)
	require.NoError(t, err)
	require.Equal(t, []string{"m2"}, rest.Bodies())
}

// A mailbox deep enough to be read through a consumer, with a failure in
// the middle: the failed message comes again, then the rest, in order.
func testDeepFailure(t *testing.T, env *testutil.Env) {
	ctx := testutil.Ctx(t, time.Minute)
	w, d := newWorld(t, env, world.Config{})
	const total = 3500
	for i := 0; i < total; i += 500 {
		ps := make([]*queue.Pending, 0, 500)
		for j := i; j < i+500; j++ {
			p, err := w.Queue.SendAsync("deep", []byte(strconv.Itoa(j)))
			require.NoError(t, err)
			ps = append(ps, p)
		}
		for _, p := range ps {
			_, err := p.Wait(ctx)
			require.NoError(t, err)
		}
	}
	lease, err := w.Ownership.Claim(ctx, "deep", "n1", time.Minute)
	require.NoError(t, err)
	rec := testutil.Recorder{Fail: func(m drain.Message) error {
		if string(m.Body) == "2500" && m.Delivery == 1 {
			return errors.New("once")
		}
		return nil
	}}
	res, err := d.DrainLease(ctx, lease, rec.Handle)
	require.NoError(t, err)
	require.Equal(t, total, res.Count)
	got := rec.Bodies()
	require.Len(t, got, total+1)
	want := 0
	for i, b := range got {
		if i == 2501 {
			require.Equal(t, "2500", b, "redelivered")
			continue
		}
		require.Equal(t, strconv.Itoa(want), b)
		want++
	}
	require.Zero(t, stored(t, w, wire.MailboxSubject(w.Name, "deep")))
	names := handles.Of(w).Mailbox.ConsumerNames(ctx)
	for range names.Name() {
		t.Error("a consumer outlived the drain")
	}
}

// A caller that cancels mid-drain keeps what was acknowledged, and the
// lock is released at once.
func testCancelled(t *testing.T, env *testutil.Env) {
	ctx := testutil.Ctx(t, time.Minute)
	w, d := newWorld(t, env, world.Config{})
	send(t, ctx, w, "a", "1", "2", "3", "4")
	lease, err := w.Ownership.Claim(ctx, "a", "n1", time.Minute)
	require.NoError(t, err)
	cctx, cancel := context.WithCancel(ctx)
	var rec testutil.Recorder
	res, err := d.DrainLease(cctx, lease, func(hctx context.Context, m drain.Message) error {
		if string(m.Body) == "3" {
			cancel()
			return hctx.Err()
		}
		return rec.Handle(hctx, m)
	})
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, 2, res.Count)
	var rest testutil.Recorder
	res, err = d.DrainLease(ctx, lease, rest.Handle)
	require.NoError(t, err, "the lock was released")
	require.Equal(t, []string{"3", "4"}, rest.Bodies())
	require.Equal(t, 2, res.Count)
}

func testMax(t *testing.T, env *testutil.Env) {
	ctx := testutil.Ctx(t, time.Minute)
	w, d := newWorld(t, env, world.Config{}, drain.WithBatch(2))
	send(t, ctx, w, "a", "1", "2", "3", "4", "5")
	lease, err := w.Ownership.Claim(ctx, "a", "n1", time.Minute)
	require.NoError(t, err)
	var rec testutil.Recorder
	res, err := d.DrainLease(ctx, lease, rec.Handle, drain.WithMax(3))
	require.NoError(t, err)
	require.Equal(t, 3, res.Count)
	require.Equal(t, []string{"1", "2", "3"}, rec.Bodies())
	res, err = d.Drain(ctx, "a", "n1", lease.Epoch, rec.Handle)
	require.NoError(t, err)
	require.Equal(t, 2, res.Count)
	require.Equal(t, []string{"1", "2", "3", "4", "5"}, rec.Bodies())
}

func testDedupe(t *testing.T, env *testutil.Env) {
	ctx := testutil.Ctx(t, time.Minute)
	w, _ := newWorld(t, env, world.Config{})
	p1, err := w.Queue.Send(ctx, "a", []byte("once"), queue.WithMsgID("k-1"))
	require.NoError(t, err)
	require.False(t, p1.Duplicate)
	p2, err := w.Queue.Send(ctx, "a", []byte("once"), queue.WithMsgID("k-1"))
	require.NoError(t, err)
	require.True(t, p2.Duplicate)
	require.Equal(t, p1.Seq, p2.Seq)
	require.Equal(t, uint64(1), stored(t, w, wire.MailboxSubject(w.Name, "a")))
	st, err := w.Mailboxes.Stat(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, uint64(1), st.Depth)
}

func testFull(t *testing.T, env *testutil.Env) {
	ctx := testutil.Ctx(t, time.Minute)
	w, _ := newWorld(t, env, world.Config{MaxMsgsPerMailbox: 3})
	send(t, ctx, w, "a", "1", "2", "3")
	_, err := w.Queue.Send(ctx, "a", []byte("4"))
	var full *queue.FullError
	require.ErrorAs(t, err, &full)
	require.ErrorIs(t, err, queue.ErrFull)
	require.Equal(t, int64(3), full.Limit)
	require.Equal(t, uint64(3), stored(t, w, wire.MailboxSubject(w.Name, "a")))
	// Another mailbox is not affected.
	send(t, ctx, w, "b", "1")

	// The byte limit folds into the count: 64 KiB / 16 KiB = 4 messages.
	w2, _ := newWorld(t, env, world.Config{MaxMsgSize: 16 << 10, MaxBytesPerMailbox: 64 << 10})
	require.Equal(t, int64(4), w2.Queue.Limit())
	send(t, ctx, w2, "a", "1", "2", "3", "4")
	_, err = w2.Queue.Send(ctx, "a", []byte("5"))
	require.ErrorIs(t, err, queue.ErrFull)
}

func testTooLarge(t *testing.T, env *testutil.Env) {
	ctx := testutil.Ctx(t, time.Minute)
	w, _ := newWorld(t, env, world.Config{MaxMsgSize: 4096})
	_, err := w.Queue.Send(ctx, "a", make([]byte, 5000))
	var tl *queue.TooLargeError
	require.ErrorAs(t, err, &tl)
	require.Equal(t, 4096-1024, tl.Limit)
	require.Contains(t, err.Error(), "5000 bytes")
	require.Zero(t, stored(t, w, wire.MailboxSubject(w.Name, "a")))
	// Just under the limit goes through.
	_, err = w.Queue.Send(ctx, "a", make([]byte, 4096-1024))
	require.NoError(t, err)
}

// A restart of the server between drains loses no posted message and
// delivers nothing committed again.
func TestDrain_RestartBetweenDrains(t *testing.T) {
	env := testutil.Start(t, testutil.Target{Name: "single"})
	ctx := testutil.Ctx(t, time.Minute)
	w, d := newWorld(t, env, world.Config{})
	var want []string
	for i := range 100 {
		want = append(want, strconv.Itoa(i))
	}
	send(t, ctx, w, "a", want...)
	lease, err := w.Ownership.Claim(ctx, "a", "n1", time.Hour)
	require.NoError(t, err)
	var rec testutil.Recorder
	res, err := d.DrainLease(ctx, lease, rec.Handle, drain.WithMax(60))
	require.NoError(t, err)
	require.Equal(t, 60, res.Count)

	env.Node.Restart(t)
	testutil.WaitWorld(t, env, w.Name)
	w, err = env.Client.World(ctx, w.Name)
	require.NoError(t, err)
	d, err = drain.New(w.World, w.Ownership)
	require.NoError(t, err)
	send(t, ctx, w, "a", "100", "101")
	want = append(want, "100", "101")
	_, err = d.DrainLease(ctx, lease, rec.Handle)
	require.NoError(t, err)
	require.Equal(t, want, rec.Bodies(), "every message once, in order")
}
