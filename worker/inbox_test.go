package worker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/worker"
	"github.com/fencepost/fencepost/world"
)

// TestInbox_OverflowDuringDrain: the holding's first drain reads the 300
// messages posted before the worker started, 100 at a time, and waits in
// its handler on the first; meanwhile 600 more posts overflow the id's
// inbox (256). Once the handler returns, the drain reads on to the end of
// the mailbox, past every dropped post: every message is handed out once,
// in order, and the next delivery is not another drain (the drop is
// covered, drain.Holding.Covers); the inbox grew. Later posts, which
// overflow nothing, come through the inbox without a drain.
func TestInbox_OverflowDuringDrain(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{})
	ctx := testutil.Ctx(t, 2*time.Minute)

	release := make(chan struct{})
	var got []uint64
	gotCh := make(chan uint64, 4096)
	send := func(n int) {
		for i := range n {
			_, err := w.Queue.Send(ctx, "x", fmt.Appendf(nil, "m%d", i))
			require.NoError(t, err)
		}
	}
	send(300)
	wk := runWorker(t, ctx, w, blockFirst(release, gotCh), drain.WithBatch(100))
	testutil.WaitFor(t, 30*time.Second, "the first drain in its handler", func() bool { return len(gotCh) == 0 && worker.DrainRuns(wk) == 1 })

	send(600)
	// The feed delivers the posts to the inbox while the handler waits:
	// 256 fit, the rest are dropped.
	testutil.WaitFor(t, 30*time.Second, "the inbox to overflow", func() bool { return inboxFull(wk) })
	close(release)
	collect := func(n int) {
		deadline := time.After(time.Minute)
		for len(got) < n {
			select {
			case s := <-gotCh:
				got = append(got, s)
			case <-deadline:
				t.Fatalf("%d of %d messages handed out", len(got), n)
			}
		}
	}
	collect(900)
	for i, s := range got {
		require.Equal(t, uint64(i+1), s, "message %d", i)
	}
	// Whatever the feed still hands the holding is covered: no second
	// drain, however long it is given.
	testutil.WaitFor(t, 30*time.Second, "the inbox to grow", func() bool { _, c := worker.Inbox(wk, "x"); return c > 256 })
	before := worker.DrainRuns(wk)
	require.EqualValues(t, 1, before, "a drain after the overflow that the first drain covered")

	send(100)
	collect(1000)
	for i, s := range got {
		require.Equal(t, uint64(i+1), s, "message %d", i)
	}
	select {
	case s := <-gotCh:
		t.Fatalf("message %d handed out twice", s)
	case <-time.After(200 * time.Millisecond):
	}
	require.EqualValues(t, before, worker.DrainRuns(wk), "posts that overflow nothing came through a drain")
}

// TestInbox_OverflowNotCovered: the holding's first drain reads the one
// message posted before the worker started and waits in its handler; 600
// posts overflow the inbox meanwhile. That drain ends at its read, before
// them, so the dropped posts are not covered: the next delivery drains
// from the cursor, and every message is handed out once, in order (a
// delivery of the inbox alone would skip those it dropped, and only a
// scan, an hour away here, would find them).
func TestInbox_OverflowNotCovered(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{})
	ctx := testutil.Ctx(t, 2*time.Minute)

	release := make(chan struct{})
	gotCh := make(chan uint64, 4096)
	_, err := w.Queue.Send(ctx, "x", []byte("first"))
	require.NoError(t, err)
	wk := runWorker(t, ctx, w, blockFirst(release, gotCh))
	testutil.WaitFor(t, 30*time.Second, "the first drain", func() bool { return worker.DrainRuns(wk) == 1 })
	for i := range 600 {
		_, err := w.Queue.Send(ctx, "x", fmt.Appendf(nil, "m%d", i))
		require.NoError(t, err)
	}
	testutil.WaitFor(t, 30*time.Second, "the inbox to overflow", func() bool { return inboxFull(wk) })
	close(release)
	deadline := time.After(time.Minute)
	for want := uint64(1); want <= 601; want++ {
		select {
		case s := <-gotCh:
			require.Equal(t, want, s)
		case <-deadline:
			t.Fatalf("%d of 601 messages handed out", want-1)
		}
	}
	require.GreaterOrEqual(t, worker.DrainRuns(wk), int64(2), "the dropped posts came without a drain")
}

// blockFirst is a handler that waits in the call for message 1 until
// release is closed, and sends each sequence it handles to got.
func blockFirst(release <-chan struct{}, got chan<- uint64) drain.Handler {
	return func(ctx context.Context, m drain.Message) error {
		if m.Seq == 1 {
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		got <- m.Seq
		return nil
	}
}

// runWorker runs a worker of id x only (the scan an hour away: only its
// consumer brings posts) until the test ends.
func runWorker(t *testing.T, ctx context.Context, w *client.World, hd drain.Handler, opts ...drain.Option) *worker.Worker {
	t.Helper()
	wk, err := w.NewWorker(worker.Config{Node: "n1", TTL: 5 * time.Second, IDs: []string{"x"}, Scan: time.Hour, DrainOptions: opts}, hd)
	require.NoError(t, err)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- wk.Run(rctx) }()
	t.Cleanup(func() { stop(); <-done })
	return wk
}

// inboxFull says whether x's inbox is full.
func inboxFull(wk *worker.Worker) bool {
	n, c := worker.Inbox(wk, "x")
	return c > 0 && n == c
}
