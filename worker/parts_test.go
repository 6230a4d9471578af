package worker_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/fencing"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/worker"
	"github.com/fencepost/fencepost/world"
)

// TestPartitioned: three workers of a world with 12 partitions, each on
// its own connection as processes would be. Once they have listed each
// other each serves some of the partitions; posts made while they run
// reach about one worker each, not all three (what partitions are for:
// docs/design/partitions.md), and are all delivered, in order within an epoch,
// never by two handlers at once. One worker loses some republished posts
// on the way (a fault the server cannot be made to cause: core NATS
// delivery lost), which the next post of the id shows as a gap; another
// crashes midway, and the others take over its partitions and ids.
func TestPartitioned(t *testing.T) {
	const ids, perID, partitions = 30, 40, 12
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{Partitions: partitions})
	ctx := testutil.Ctx(t, 3*time.Minute)
	lg := newLedger()
	var dropped atomic.Int64
	type running struct {
		wk   *worker.Worker
		c    *client.Client
		stop context.CancelFunc
		done chan error
	}
	start := func(node string, drop func(uint64) bool) *running {
		c, err := client.Connect(env.URL)
		require.NoError(t, err)
		cw, err := c.World(ctx, w.Name)
		require.NoError(t, err)
		wk, err := cw.NewWorker(worker.Config{Node: node, TTL: time.Second}, lg.handler(node))
		require.NoError(t, err)
		if drop != nil {
			worker.SetRepublishFault(wk, drop)
		}
		rctx, stop := context.WithCancel(ctx)
		r := &running{wk: wk, c: c, stop: stop, done: make(chan error, 1)}
		go func() { r.done <- wk.Run(rctx) }()
		return r
	}
	workers := []*running{
		start("w1", func(seq uint64) bool {
			if seq%7 == 0 && dropped.Load() < 20 {
				dropped.Add(1)
				return true
			}
			return false
		}),
		start("w2", nil),
		start("w3", nil),
	}
	defer func() {
		for _, r := range workers {
			r.stop()
			<-r.done
			r.c.Close()
		}
	}()
	served := func() (each []int, sum int) {
		for _, r := range workers {
			n, _ := worker.Partitions(r.wk)
			each = append(each, n)
			sum += n
		}
		return each, sum
	}
	testutil.WaitFor(t, 30*time.Second, "the partitions split between the workers", func() bool {
		each, sum := served()
		for _, n := range each {
			if n == 0 || n == partitions {
				return false
			}
		}
		return sum == partitions
	})

	total := ids * perID
	post := func(from, to int) {
		for j := from; j < to; j++ {
			for i := range ids {
				_, err := w.Queue.Send(ctx, fmt.Sprint("id-", i), []byte(fmt.Sprint(j)))
				require.NoError(t, err)
			}
		}
	}
	post(0, perID/2)
	testutil.WaitFor(t, time.Minute, "the first half delivered", func() bool { return lg.delivered() >= total/2 })
	// Crash w2: its connection dies with it; its partitions and ids go to
	// the others.
	workers[1].c.Close()
	select {
	case err := <-workers[1].done:
		require.ErrorIs(t, err, fencing.CauseWatchdog)
		workers[1].done <- err
	case <-time.After(10 * time.Second):
		t.Fatal("the crashed worker did not self-fence")
	}
	testutil.WaitFor(t, 30*time.Second, "the others serve the crashed worker's partitions", func() bool {
		n1, _ := worker.Partitions(workers[0].wk)
		n3, _ := worker.Partitions(workers[2].wk)
		return n1+n3 == partitions
	})
	post(perID/2, perID)
	testutil.WaitFor(t, 2*time.Minute, "every message delivered", func() bool { return lg.delivered() >= total })
	require.NotZero(t, dropped.Load(), "the fault dropped no post")

	var received int64
	for _, r := range workers {
		_, n := worker.Partitions(r.wk)
		received += n
	}
	t.Logf("posts %d, received by the workers' feeds %d, dropped %d", total, received, dropped.Load())
	require.Less(t, received, int64(2*total), "the workers each read most posts: not partitioned")

	require.Zero(t, lg.overlaps.Load(), "an id was handled by two handlers at once")
	lg.mu.Lock()
	defer lg.mu.Unlock()
	require.Len(t, lg.byID, ids)
	for id, ds := range lg.byID {
		for i := 1; i < len(ds); i++ {
			require.GreaterOrEqual(t, ds[i].epoch, ds[i-1].epoch, "%s: epochs went back", id)
			if ds[i].epoch == ds[i-1].epoch {
				require.Greater(t, ds[i].seq, ds[i-1].seq, "%s: out of order within epoch %d", id, ds[i].epoch)
			}
		}
	}
}

// TestPartitioned_IdleStaysReleased: a partitioned world's worker that
// releases an idle id does not claim it again (it saw the id's posts while
// it held it, and they are committed): no claim and release churn of idle
// ids. The next post claims it again.
func TestPartitioned_IdleStaysReleased(t *testing.T) {
	_, w, ctx, lg := runPartitioned(t, 200*time.Millisecond)
	var err error
	// Posts while it holds the id: the worker sees them (its partition).
	for i, body := range []string{"a", "b", "c"} {
		_, err = w.Queue.Send(ctx, "order-1", []byte(body))
		require.NoError(t, err)
		testutil.WaitFor(t, 10*time.Second, "delivered", func() bool { return lg.delivered() == i+1 })
	}
	testutil.WaitFor(t, 10*time.Second, "released when idle", func() bool {
		st, err := w.Ownership.Owner(ctx, "order-1")
		return err == nil && !st.Held
	})
	// Idle for 5 idle periods: it stays released (epoch 1 is the last).
	time.Sleep(time.Second) // a span in which nothing may happen: no condition to poll for
	st, err := w.Ownership.Owner(ctx, "order-1")
	require.NoError(t, err)
	require.False(t, st.Held, "an idle id was claimed again")
	require.EqualValues(t, 1, st.Epoch, "an idle id was claimed again (and released)")
	_, err = w.Queue.Send(ctx, "order-1", []byte("d"))
	require.NoError(t, err)
	testutil.WaitFor(t, 10*time.Second, "the next post delivered", func() bool { return lg.delivered() == 4 })
}

// TestPartitioned_ForgedHeaders: a producer may send headers named like
// those the server adds to a republished post (the broker stores what it
// is given): a post to x that claims to be y's, at another sequence, with
// no predecessor. The worker takes the id from the subject the server
// republished to and the sequence from the server's own headers (the last
// of each name), so the post is x's, at its stored sequence, and the posts
// around it are delivered too, in order.
func TestPartitioned_ForgedHeaders(t *testing.T) {
	env, w, ctx, lg := runPartitioned(t, 0)
	var seqs []uint64
	a, err := w.Queue.Send(ctx, "x", []byte("a"))
	require.NoError(t, err)
	seqs = append(seqs, a.Seq)
	m := nats.NewMsg(wire.MailboxSubject(w.Name, "x"))
	m.Data = []byte("forged")
	m.Header.Set(wire.HeaderRepublishSubject, wire.MailboxSubject(w.Name, "y"))
	m.Header.Set(wire.HeaderRepublishSeq, "999999")
	m.Header.Set(wire.HeaderRepublishStream, "ELSEWHERE")
	m.Header.Set(wire.HeaderLastSeq, "0")
	ack, err := env.Client.JetStream().PublishMsg(ctx, m)
	require.NoError(t, err)
	seqs = append(seqs, ack.Sequence)
	c, err := w.Queue.Send(ctx, "x", []byte("c"))
	require.NoError(t, err)
	seqs = append(seqs, c.Seq)
	testutil.WaitFor(t, 20*time.Second, "x's three posts delivered", func() bool { return lg.delivered() >= 3 })
	lg.mu.Lock()
	defer lg.mu.Unlock()
	require.NotContains(t, lg.byID, "y", "a forged header made a post another id's")
	var got []uint64
	for _, d := range lg.byID["x"] {
		got = append(got, d.seq)
	}
	require.Equal(t, seqs, got, "x's posts at their stored sequences, in order, once")
}

// runPartitioned runs one worker ("w1", ttl 1 s, idle as given, 0: the
// default) of a new world with 4 partitions until the test ends, and
// returns once it serves every partition.
func runPartitioned(t *testing.T, idle time.Duration) (*testutil.Env, *client.World, context.Context, *ledger) {
	t.Helper()
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{Partitions: 4})
	ctx := testutil.Ctx(t, time.Minute)
	lg := newLedger()
	wk, err := w.NewWorker(worker.Config{Node: "w1", TTL: time.Second, Idle: idle}, lg.handler("w1"))
	require.NoError(t, err)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- wk.Run(rctx) }()
	t.Cleanup(func() {
		stop()
		require.NoError(t, <-done)
	})
	testutil.WaitFor(t, 10*time.Second, "the worker serves every partition", func() bool {
		n, _ := worker.Partitions(wk)
		return n == 4
	})
	return env, w, ctx, lg
}

// TestPartitioned_ListedIDs: a worker of a list of ids on a partitioned
// world subscribes to its ids' republished posts instead of reading the
// mailbox stream with a consumer (there is none), and still delivers
// every post of its ids, in order, once each: a post lost on the way
// (a test hook: core NATS loses nothing on demand) shows as a gap at the
// next one and is drained from the cursor, and an id released when idle
// is claimed again by its next post (its subscription stays; the scan,
// every hour here, would not find it). Another id's posts never reach it.
func TestPartitioned_ListedIDs(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{Partitions: 4})
	ctx := testutil.Ctx(t, 2*time.Minute)
	lg := newLedger()
	wk, err := w.NewWorker(worker.Config{Node: "n1", TTL: time.Second, IDs: []string{"a", "b"}, Idle: 200 * time.Millisecond, Scan: time.Hour}, lg.handler("n1"))
	require.NoError(t, err)
	var dropped atomic.Int64
	worker.SetRepublishFault(wk, func(seq uint64) bool {
		if seq%5 == 0 && dropped.Load() < 4 {
			dropped.Add(1)
			return true
		}
		return false
	})
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- wk.Run(rctx) }()
	defer func() { stop(); require.NoError(t, <-done) }()
	// Posted before the subscriptions are in place, a post is never
	// republished to the feed (the node lease comes first: under load
	// CI posted into that moment, and the feed counted 48 of 50).
	testutil.WaitFor(t, 10*time.Second, "the worker's subscriptions", func() bool { return worker.Subscribed(wk) })

	var want []uint64 // the posts of a and b, in stream order
	post := func(n int) {
		for range n {
			for _, id := range []string{"a", "b", "c"} {
				r, err := w.Queue.Send(ctx, id, []byte(id))
				require.NoError(t, err)
				if id != "c" {
					want = append(want, r.Seq)
				}
			}
		}
	}
	post(20)
	testutil.WaitFor(t, time.Minute, "the first posts delivered", func() bool { return lg.delivered() == len(want) })
	require.NotZero(t, dropped.Load(), "the fault dropped no post")
	testutil.WaitFor(t, 10*time.Second, "both ids released when idle", func() bool {
		for _, id := range []string{"a", "b"} {
			if st, err := w.Ownership.Owner(ctx, id); err != nil || st.Held {
				return false
			}
		}
		return true
	})
	post(5)
	testutil.WaitFor(t, time.Minute, "the posts after the release delivered", func() bool { return lg.delivered() == len(want) })

	// Each post of a and b reaches the feed once (a dropped one counted
	// too: the fault drops it after), and no other id's post does. A
	// drain may hand out a post before its republished copy is counted.
	testutil.WaitFor(t, 10*time.Second, "the feed counted every post of a and b", func() bool {
		_, received := worker.Partitions(wk)
		return received >= int64(len(want))
	})
	served, received := worker.Partitions(wk)
	require.Zero(t, served, "a worker of a list serves no partition")
	require.EqualValues(t, len(want), received, "the feed got a post that is not its ids'")
	n := 0
	for range handles.Of(w).Mailbox.ConsumerNames(ctx).Name() {
		n++
	}
	require.Zero(t, n, "a consumer reads the mailbox stream")

	lg.mu.Lock()
	defer lg.mu.Unlock()
	require.NotContains(t, lg.byID, "c")
	var got []uint64
	for _, id := range []string{"a", "b"} {
		for _, d := range lg.byID[id] {
			got = append(got, d.seq)
		}
	}
	slices.Sort(got)
	require.Equal(t, want, got, "every post of a and b once")
	for id, ds := range lg.byID {
		for i := 1; i < len(ds); i++ {
			require.Greater(t, ds[i].seq, ds[i-1].seq, "%s: out of order or twice", id)
		}
	}
}

// TestPartitioned_FirstDeliveryFromPosts: a partitioned world's worker
// keeps the posts of its partitions' ids nobody holds, and an id's first
// delivery after its claim hands them out without reading the mailbox
// (docs/design/partitions.md, "The first delivery"). When the worker did not
// get a post (lost on the way: a test hook, core NATS loses nothing on
// demand), the next one names it, and the first delivery drains from the
// cursor: every message once, in order. The posts wait for the scan at
// the worker's start to end (it would read the mailbox for the ids it
// lists, and nudge held ids into drains of their own); the next is an
// hour away.
func TestPartitioned_FirstDeliveryFromPosts(t *testing.T) {
	const ids, perID, partitions = 40, 3, 4
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{Partitions: partitions})
	ctx := testutil.Ctx(t, 2*time.Minute)
	lg := newLedger()
	var dropNext atomic.Int64
	wk, err := w.NewWorker(worker.Config{Node: "w1", TTL: 5 * time.Second, Idle: time.Hour, Scan: time.Hour}, lg.handler("w1"))
	require.NoError(t, err)
	worker.SetRepublishFault(wk, func(uint64) bool { return dropNext.CompareAndSwap(1, 0) })
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- wk.Run(rctx) }()
	defer func() {
		stop()
		require.NoError(t, <-done)
	}()
	testutil.WaitFor(t, 30*time.Second, "the worker serves every partition", func() bool {
		n, _ := worker.Partitions(wk)
		return n == partitions
	})
	testutil.WaitFor(t, 30*time.Second, "the scan at the start ended", func() bool { return worker.ScansDone(wk) >= 1 })
	// The reads of the mailbox stream that reach the server (direct gets
	// and leader reads), seen by a connection of the test's own.
	tap := testutil.NewTap(t, env.URL, testutil.StreamReads(wire.MailboxStream(w.Name))...)

	for j := range perID {
		for i := range ids {
			_, err := w.Queue.Send(ctx, fmt.Sprint("id-", i), []byte(fmt.Sprint(j)))
			require.NoError(t, err)
		}
	}
	testutil.WaitFor(t, time.Minute, "every message delivered", func() bool { return lg.delivered() >= ids*perID })
	require.Zero(t, tap.Count(t), "reads of the mailbox for ids whose every post the worker kept")
	require.Zero(t, worker.DrainRuns(wk))

	// "lost-0": its first post does not reach the worker, its second
	// does and names it.
	dropNext.Store(1)
	_, err = w.Queue.Send(ctx, "lost", []byte("0"))
	require.NoError(t, err)
	testutil.WaitFor(t, 10*time.Second, "the post dropped on the way", func() bool { return dropNext.Load() == 0 })
	_, err = w.Queue.Send(ctx, "lost", []byte("1"))
	require.NoError(t, err)
	testutil.WaitFor(t, 20*time.Second, "both posts of the id delivered", func() bool { return lg.delivered() >= ids*perID+2 })
	require.NotZero(t, tap.Count(t), "the first delivery read the mailbox")

	require.Zero(t, lg.overlaps.Load())
	lg.mu.Lock()
	defer lg.mu.Unlock()
	require.Len(t, lg.byID, ids+1)
	for id, ds := range lg.byID {
		require.Len(t, ds, map[bool]int{true: 2, false: perID}[id == "lost"], "%s delivered once each", id)
		for i := 1; i < len(ds); i++ {
			require.Greater(t, ds[i].seq, ds[i-1].seq, "%s: out of order", id)
		}
	}
}

// moving is a partitioned world of ids whose worker w1 holds every id
// alone and then meets w2, which takes some of the partitions
// (TestPartitioned_QueuedPostsWhenAPartitionLeaves and
// TestPartitioned_ScanNudgesHeldIDsOfOtherPartitions).
type moving struct {
	t   *testing.T
	ctx context.Context
	env *testutil.Env
	w   *client.World
	lg  *ledger
	ids int
}

func newMoving(t *testing.T, ids, partitions int) *moving {
	env := testutil.Start(t, testutil.Targets()[0])
	return &moving{t: t, ctx: testutil.Ctx(t, 2*time.Minute), env: env, w: env.World(t, world.Config{Partitions: partitions}), lg: newLedger(), ids: ids}
}

// start runs a worker of node on its own connection, scanning every scan,
// with hook on its republished posts; the returned func stops it.
func (mv *moving) start(node string, scan time.Duration, hook func(uint64) bool) (*worker.Worker, func()) {
	t := mv.t
	c, err := client.Connect(mv.env.URL)
	require.NoError(t, err)
	cw, err := c.World(mv.ctx, mv.w.Name)
	require.NoError(t, err)
	wk, err := cw.NewWorker(worker.Config{Node: node, TTL: time.Second, Idle: time.Hour, Scan: scan}, mv.lg.handler(node))
	require.NoError(t, err)
	if hook != nil {
		worker.SetRepublishFault(wk, hook)
	}
	rctx, stop := context.WithCancel(mv.ctx)
	done := make(chan error, 1)
	go func() { done <- wk.Run(rctx) }()
	return wk, func() {
		stop()
		require.NoError(t, <-done)
		c.Close()
	}
}

// post sends body to every id.
func (mv *moving) post(body string) {
	for i := range mv.ids {
		_, err := mv.w.Queue.Send(mv.ctx, fmt.Sprint("id-", i), []byte(body))
		require.NoError(mv.t, err)
	}
}

// waitServed waits until wk serves partitions that say ok.
func (mv *moving) waitServed(wk *worker.Worker, what string, ok func(n int) bool) {
	testutil.WaitFor(mv.t, 30*time.Second, what, func() bool {
		n, _ := worker.Partitions(wk)
		return ok(n)
	})
}

// TestPartitioned_QueuedPostsWhenAPartitionLeaves: posts a worker's client
// received and had not routed yet when a partition left it (another node
// joined) are routed, not dropped. A post of a held id stored before the
// id's own subscription was in place reached only the partition's, and
// with none after it nobody would have handed it out: its holder's scan
// is an hour away here. The worker's routing is held up by a test hook
// while the posts come and the partitions move.
func TestPartitioned_QueuedPostsWhenAPartitionLeaves(t *testing.T) {
	const ids, partitions = 30, 8
	mv := newMoving(t, ids, partitions)
	var gate sync.RWMutex
	held := func(uint64) bool {
		gate.RLock() // held up while the test holds gate
		gate.RUnlock()
		return false
	}
	w1, stop1 := mv.start("w1", time.Hour, held)
	defer stop1()
	mv.waitServed(w1, "w1 serves every partition", func(n int) bool { return n == partitions })
	mv.post("0")
	testutil.WaitFor(t, time.Minute, "the first posts delivered", func() bool { return mv.lg.delivered() >= ids })

	// The server has sent w1 every second post (a tap of the same
	// subjects got them all) while w1 routes none.
	tap, err := nats.Connect(mv.env.URL)
	require.NoError(t, err)
	defer tap.Close()
	var tapped atomic.Int64
	_, err = tap.Subscribe(wire.RepublishFilter(mv.w.Name), func(*nats.Msg) { tapped.Add(1) })
	require.NoError(t, err)
	require.NoError(t, tap.Flush())
	gate.Lock()
	mv.post("1")
	testutil.WaitFor(t, 10*time.Second, "the second posts sent", func() bool { return tapped.Load() >= ids })
	_, stop2 := mv.start("w2", time.Hour, held)
	defer stop2()
	mv.waitServed(w1, "partitions left w1 for w2", func(n int) bool { return n < partitions })
	gate.Unlock()
	testutil.WaitFor(t, 20*time.Second, "every second post delivered", func() bool { return mv.lg.delivered() >= 2*ids })
	require.Zero(t, mv.lg.overlaps.Load())
}

// TestPartitioned_ScanNudgesHeldIDsOfOtherPartitions: a post of a held id
// that never reached its holder, with none after it, is handed out at the
// holder's next scan, also when the id's partition is another worker's
// (the holder then reads it through a subscription of its own). Here w1
// claims every id alone, w2 joins and takes some partitions, and w1 loses
// every post of one round on the way (a test hook).
func TestPartitioned_ScanNudgesHeldIDsOfOtherPartitions(t *testing.T) {
	const ids, partitions = 30, 8
	mv := newMoving(t, ids, partitions)
	var lose atomic.Bool
	w1, stop1 := mv.start("w1", 500*time.Millisecond, func(uint64) bool { return lose.Load() })
	defer stop1()
	mv.waitServed(w1, "w1 serves every partition", func(n int) bool { return n == partitions })
	mv.post("0")
	testutil.WaitFor(t, time.Minute, "the first posts delivered", func() bool { return mv.lg.delivered() >= ids })
	_, stop2 := mv.start("w2", 500*time.Millisecond, nil)
	defer stop2()
	mv.waitServed(w1, "partitions left w1 for w2", func(n int) bool { return n < partitions })
	lose.Store(true)
	mv.post("1")
	testutil.WaitFor(t, 10*time.Second, "w1 saw the round", func() bool {
		_, n := worker.Partitions(w1)
		return n >= 2*ids // it holds every id: each post reaches it once
	})
	lose.Store(false)
	testutil.WaitFor(t, 20*time.Second, "every second post delivered", func() bool { return mv.lg.delivered() >= 2*ids })
	require.Zero(t, mv.lg.overlaps.Load())
}
