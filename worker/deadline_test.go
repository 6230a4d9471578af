package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/worker"
	"github.com/fencepost/fencepost/world"
)

// TestRun_DeadlineOfCtxBoundsNoRequest: a deadline on Run's context ends
// the worker when it passes, but is not the deadline of the worker's
// requests or handler calls (each request is bounded by the client's
// timeout instead). Before, a request whose answer was lost (a cluster
// member stopped under it) waited for the run's deadline, minutes away,
// holding its id and every id behind it (TestClusterFeed saw every id of
// two workers stall so).
func TestRun_DeadlineOfCtxBoundsNoRequest(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{})
	ctx := testutil.Ctx(t, time.Minute)
	deadlines := make(chan bool, 1)
	wk, err := w.NewWorker(worker.Config{Node: "n1", TTL: time.Second}, func(hctx context.Context, m drain.Message) error {
		_, has := hctx.Deadline()
		select {
		case deadlines <- has:
		default:
		}
		return nil
	})
	require.NoError(t, err)
	rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- wk.Run(rctx) }()
	_, err = w.Queue.Send(ctx, "x", []byte("1"))
	require.NoError(t, err)
	select {
	case has := <-deadlines:
		require.False(t, has, "the handler's context carries the run's deadline")
	case <-time.After(20 * time.Second):
		t.Fatal("no delivery")
	}
	select {
	case err := <-done:
		require.NoError(t, err, "a run whose deadline passed ends as a cancelled one")
	case <-time.After(20 * time.Second):
		t.Fatal("the run outlived its context's deadline")
	}
	st, err := w.Ownership.Owner(ctx, "x")
	require.NoError(t, err)
	require.False(t, st.Held, "the ids are free once the run ended")
}
