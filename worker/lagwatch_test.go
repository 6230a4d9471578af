package worker_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/worker"
	"github.com/fencepost/fencepost/world"
)

// gate holds back one step of the worker (a watch event, a claim's
// answer) in a test hook until it is opened: a watch that lags behind the
// record it follows, or a slow claim, which the server cannot be made to
// do on demand.
type gate struct {
	armed  atomic.Bool
	seen   chan struct{}
	opened chan struct{}
	once   sync.Once
}

func newGate() *gate {
	return &gate{seen: make(chan struct{}, 1), opened: make(chan struct{})}
}

// block holds the hook that calls it until the gate opens, the first time
// it is called once armed (seen says so); at other times it returns.
func (g *gate) block() {
	if g.armed.CompareAndSwap(true, false) {
		g.seen <- struct{}{}
		<-g.opened
	}
}

func (g *gate) open() { g.once.Do(func() { close(g.opened) }) }

// TestPartitioned_PostBeforeOwnRelease: a post that reaches the worker
// after it released an idle id, and before the watch showed it that
// release, is claimed and delivered; the scan (every hour here) would not
// find it. The watch is held back at the release's event while the post
// comes (until the post made x a candidate), and claims wait a second,
// so that the event is seen before the claim is due: a worker that took its own release's event to mean "no
// mail" dropped the claim, and the post waited for the scan.
func TestPartitioned_PostBeforeOwnRelease(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{Partitions: 4})
	ctx := testutil.Ctx(t, time.Minute)
	lg := newLedger()
	wk, err := w.NewWorker(worker.Config{Node: "w1", TTL: time.Second, Idle: 200 * time.Millisecond, Scan: time.Hour}, lg.handler("w1"))
	require.NoError(t, err)
	g := newGate()
	defer g.open()
	worker.SetEventHook(wk, func(ev ownership.Event) {
		if ev.ID == "x" && ev.Kind == ownership.EventReleased && ev.Node == "w1" {
			g.block()
		}
	})
	worker.SetClaimWait(wk, func(string) time.Duration { return time.Second })
	var postArmed atomic.Bool
	postHandled := make(chan struct{}, 1)
	worker.SetDispatchHooks(wk, func(id string, free bool) {
		if id == "x" && !free && postArmed.CompareAndSwap(true, false) {
			postHandled <- struct{}{}
		}
	}, nil)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- wk.Run(rctx) }()
	defer func() { g.open(); stop(); require.NoError(t, <-done) }()
	testutil.WaitFor(t, 10*time.Second, "the worker serves every partition", func() bool {
		n, _ := worker.Partitions(wk)
		return n == 4
	})

	g.armed.Store(true)
	_, err = w.Queue.Send(ctx, "x", []byte("1"))
	require.NoError(t, err)
	testutil.WaitFor(t, 10*time.Second, "the first post delivered", func() bool { return lg.delivered() == 1 })
	select {
	case <-g.seen: // released when idle; its event is held back
	case <-time.After(10 * time.Second):
		t.Fatal("x was not released when idle")
	}
	st, err := w.Ownership.Owner(ctx, "x")
	require.NoError(t, err)
	require.False(t, st.Held, "x is released on the record")

	postArmed.Store(true)
	_, err = w.Queue.Send(ctx, "x", []byte("2"))
	require.NoError(t, err)
	select {
	case <-postHandled: // the post made x a candidate: its claim is due in a second
	case <-time.After(10 * time.Second):
		t.Fatal("the second post did not make x a candidate")
	}
	require.True(t, worker.Unread(wk, "x"), "the post noted x's mail")
	g.open() // the release's event, late
	testutil.WaitFor(t, 10*time.Second, "the post after the release delivered", func() bool { return lg.delivered() == 2 })
	require.Zero(t, lg.overlaps.Load())
}

// TestDispatch_FreedWhileClaiming: a claim that found an id held, whose
// holder released it while the claim was on its way back, tries again: the
// release's event came first and found the claim running, so nothing else
// would claim the id, and a worker that took the claim's answer as the
// last word left the id's mail to the scan (every hour here) for ten
// periods. The claim's end is held back (a test hook) until the worker
// has handled the release's event.
func TestDispatch_FreedWhileClaiming(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{Partitions: 4})
	ctx := testutil.Ctx(t, time.Minute)
	lg := newLedger()
	wk, err := w.NewWorker(worker.Config{Node: "w1", TTL: time.Second, Idle: time.Hour, Scan: time.Hour}, lg.handler("w1"))
	require.NoError(t, err)
	g := newGate()
	freeHandled := make(chan struct{}, 1)
	defer g.open()
	worker.SetDispatchHooks(wk, func(id string, free bool) {
		if id == "x" && free {
			select {
			case freeHandled <- struct{}{}:
			default:
			}
		}
	}, func(id string, held bool) {
		if id == "x" && held {
			g.block()
		}
	})
	_, err = w.Ownership.Claim(ctx, "x", "b", 30*time.Second)
	require.NoError(t, err)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- wk.Run(rctx) }()
	defer func() { g.open(); stop(); require.NoError(t, <-done) }()
	testutil.WaitFor(t, 10*time.Second, "the worker serves every partition", func() bool {
		n, _ := worker.Partitions(wk)
		return n == 4
	})

	g.armed.Store(true)
	_, err = w.Queue.Send(ctx, "x", []byte("1"))
	require.NoError(t, err)
	select {
	case <-g.seen: // the claim found x held by b; its end is held back
	case <-time.After(10 * time.Second):
		t.Fatal("the post did not make x a claim")
	}
	require.NoError(t, w.Ownership.Release(ctx, "x", "b"))
	select {
	case <-freeHandled:
	case <-time.After(10 * time.Second):
		t.Fatal("the release's event did not reach the worker")
	}
	g.open() // the claim's answer, after the release's event
	testutil.WaitFor(t, 10*time.Second, "x's post delivered", func() bool { return lg.delivered() == 1 })
	require.Zero(t, lg.overlaps.Load())
}
