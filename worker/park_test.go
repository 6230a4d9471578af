package worker_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/worker"
	"github.com/fencepost/fencepost/world"
)

// TestPark: a held id with nothing to do parks (its goroutine ends) and
// is woken by what gives it work: new mail, the end of its holding by a
// forced seize, its idle release falling due, the worker's stop. Each of
// those would be missed by a parked holding that nothing wakes: mail never
// delivered, a seized id still listed as held, an idle id never released,
// Run never returning.
func TestPark(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{})
	ctx := testutil.Ctx(t, 2*time.Minute)
	const n = 20
	id := func(i int) string { return fmt.Sprint("p-", i) }
	for i := range n {
		_, err := w.Queue.Send(ctx, id(i), []byte("1"))
		require.NoError(t, err)
	}
	var mu sync.Mutex
	got := map[string][]string{}
	delivered := func(id string) []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got[id])
	}
	// Idle is long beside the waits below for what must wake a parked
	// holding at once (a seize, the stop): its idle wake would also end
	// it, later.
	const idle = 8 * time.Second
	wk, err := w.NewWorker(worker.Config{Node: "pk", TTL: 2 * time.Second, Idle: idle}, func(_ context.Context, m drain.Message) error {
		mu.Lock()
		got[m.ID] = append(got[m.ID], string(m.Body))
		mu.Unlock()
		return nil
	})
	require.NoError(t, err)
	worker.SetParkAfter(wk, 100*time.Millisecond)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- wk.Run(rctx) }()
	defer func() { stop(); <-done }()

	allParked := func(what string) {
		t.Helper()
		testutil.WaitFor(t, 20*time.Second, what, func() bool { return worker.Serving(wk) == 0 })
	}
	testutil.WaitFor(t, 30*time.Second, "every id delivered and held", func() bool {
		for i := range n {
			if len(delivered(id(i))) != 1 {
				return false
			}
		}
		return len(wk.Held()) == n
	})
	allParked("every holding parked")
	require.Len(t, wk.Held(), n, "a parked id is still held")

	// Mail wakes a parked holding: delivered, in order, by the holder.
	for _, b := range []string{"2", "3"} {
		_, err = w.Queue.Send(ctx, id(0), []byte(b))
		require.NoError(t, err)
	}
	testutil.WaitFor(t, 10*time.Second, "new mail of a parked id delivered", func() bool { return len(delivered(id(0))) == 3 })
	require.Equal(t, []string{"1", "2", "3"}, delivered(id(0)))
	allParked("parked again")

	// A forced seize ends a parked holding: it is no longer held here.
	_, err = w.Ownership.Seize(ctx, id(1), "intruder", time.Minute, true)
	require.NoError(t, err)
	testutil.WaitFor(t, 2*time.Second, "the seized id no longer held", func() bool { return !slices.Contains(wk.Held(), id(1)) })

	// The idle release falls due while parked: every id is released.
	testutil.WaitFor(t, idle+10*time.Second, "idle ids released", func() bool {
		held := wk.Held()
		return len(held) == 0
	})
	st, err := w.Ownership.Owner(ctx, id(2))
	require.NoError(t, err)
	require.False(t, st.Held, "an idle parked id is released, not left to lapse")

	// The stop ends parked holdings: Run returns, their ids free at once.
	_, err = w.Queue.Send(ctx, id(3), []byte("2"))
	require.NoError(t, err)
	testutil.WaitFor(t, 10*time.Second, "id 3 delivered again", func() bool { return len(delivered(id(3))) == 2 })
	allParked("id 3 parked")
	require.Contains(t, wk.Held(), id(3))
	stop()
	select {
	case err := <-done:
		require.NoError(t, err)
		done <- nil
	case <-time.After(3 * time.Second):
		t.Fatal("Run did not return at once with a parked holding")
	}
	st, err = w.Ownership.Owner(ctx, id(3))
	require.NoError(t, err)
	require.False(t, st.Held, "a parked id is free once the worker stopped")
}

// TestRun_FeedSetupRetried: the worker's consumers cannot be made twice
// for a reason that passes (a timeout, then JetStream "temporarily
// unavailable" as a cluster answers while it elects a leader: injected,
// since a real server cannot be made to fail on demand at that one step),
// and the worker starts anyway and delivers; a reason that does not pass
// ends Run with it. Without the retry Run returned the first timeout; a
// final worker of the partition-minority scenario, started right after a
// heal, returned the 503 (CI, 1 Dec).
func TestRun_FeedSetupRetried(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{})
	ctx := testutil.Ctx(t, time.Minute)
	_, err := w.Queue.Send(ctx, "r", []byte("1"))
	require.NoError(t, err)
	got := make(chan string, 1)
	wk, err := w.NewWorker(worker.Config{Node: "rt", TTL: 2 * time.Second}, func(_ context.Context, m drain.Message) error {
		got <- string(m.Body)
		return nil
	})
	require.NoError(t, err)
	var fails atomic.Int32
	worker.SetFeedFault(wk, func() error {
		switch fails.Add(1) {
		case 1:
			return context.DeadlineExceeded
		case 2:
			return &jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}
		}
		return nil
	})
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- wk.Run(rctx) }()
	select {
	case b := <-got:
		require.Equal(t, "1", b)
	case err := <-done:
		t.Fatalf("Run ended at its start: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("nothing delivered")
	}
	require.EqualValues(t, 3, fails.Load(), "two failed setups, then one that worked")
	stop()
	require.NoError(t, <-done)

	boom := errors.New("boom")
	wk2, err := w.NewWorker(worker.Config{Node: "rt2", TTL: 2 * time.Second}, func(context.Context, drain.Message) error { return nil })
	require.NoError(t, err)
	worker.SetFeedFault(wk2, func() error { return boom })
	require.ErrorIs(t, wk2.Run(ctx), boom, "a failure that does not pass ends Run")
}

// TestStop_ReleasesBounded: a worker that stops holding many ids commits
// and releases each (every id free right after Run returns, as a clean
// stop promises), with at most stopWrites of them sending at once. Before
// the bound every held id sent its writes at the same moment.
func TestStop_ReleasesBounded(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{})
	ctx := testutil.Ctx(t, 2*time.Minute)
	const n = 300
	id := func(i int) string { return fmt.Sprint("s-", i) }
	for i := range n {
		_, err := w.Queue.Send(ctx, id(i), []byte("1"))
		require.NoError(t, err)
	}
	var delivered atomic.Int64
	wk, err := w.NewWorker(worker.Config{Node: "st", TTL: 5 * time.Second, Idle: time.Minute, Parallel: n}, func(context.Context, drain.Message) error {
		delivered.Add(1)
		return nil
	})
	require.NoError(t, err)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- wk.Run(rctx) }()
	testutil.WaitFor(t, time.Minute, "every id delivered and held", func() bool {
		return delivered.Load() >= n && len(wk.Held()) == n
	})
	stop()
	require.NoError(t, <-done)

	seen, bound := worker.EndMax(wk)
	require.Positive(t, seen, "the stop's writes went through the slots")
	require.LessOrEqual(t, seen, int64(bound), "at most %d ids send their last writes at once", bound)
	for i := range n {
		st, err := w.Ownership.Owner(ctx, id(i))
		require.NoError(t, err)
		require.False(t, st.Held, "id %s released at the stop", id(i))
	}
}
