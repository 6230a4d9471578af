package worker_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/fencing"
	"github.com/fencepost/fencepost/server/servertest"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/worker"
	"github.com/fencepost/fencepost/world"
)

// TestCommitEvery_ShardedWorldsPeriod: on a sharded world, a state
// worker's CommitEvery is its shards' commit period. With a day's period
// every message is handled and none committed while it serves (the next
// tick is a day away); the graceful stop commits them. With the default
// (200 ms with state) commits come while it serves. A period below 0 is
// refused before anything is written.
func TestCommitEvery_ShardedWorldsPeriod(t *testing.T) {
	env := testutil.Start(t, testutil.Target{Name: "single"})
	w := env.World(t, world.Config{Shards: 2})
	ctx := testutil.Ctx(t, time.Minute)

	_, err := w.NewStateWorker(worker.Config{Node: "n0", CommitEvery: -time.Second}, func(context.Context, drain.Message, *drain.State) error { return nil })
	require.ErrorIs(t, err, fencing.ErrInvalidOption)

	for _, tc := range []struct {
		every     time.Duration
		whileRuns bool // commits come while it serves
	}{{24 * time.Hour, false}, {0, true}} {
		t.Run(fmt.Sprintf("every=%v", tc.every), func(t *testing.T) {
			var handled atomic.Int64
			node := fmt.Sprintf("n-%d", int64(tc.every))
			wk, err := w.NewStateWorker(worker.Config{Node: node, TTL: 2 * time.Second, CommitEvery: tc.every}, func(_ context.Context, m drain.Message, st *drain.State) error {
				handled.Add(1)
				return st.Put("last", m.Body)
			})
			require.NoError(t, err)
			base := wk.Shards().Stats().Commits
			rctx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- wk.Run(rctx) }()
			// Posts over 600 ms, three default periods: a worker that
			// kept the default would commit among them.
			const n = 40
			tick := time.NewTicker(15 * time.Millisecond)
			defer tick.Stop()
			for i := range n {
				<-tick.C
				_, err := w.Send(ctx, fmt.Sprintf("%s-id-%d", node, i%8), []byte(fmt.Sprint(i)))
				require.NoError(t, err)
			}
			servertest.CheckFor(t, 20*time.Second, 10*time.Millisecond, func() error {
				if got := handled.Load(); got < n {
					return fmt.Errorf("handled %d of %d", got, n)
				}
				if tc.whileRuns && wk.Shards().Stats().Commits == base {
					return fmt.Errorf("no commit yet")
				}
				return nil
			})
			if !tc.whileRuns {
				require.Equal(t, base, wk.Shards().Stats().Commits, "committed while serving, with a period of a day")
			}
			stop()
			require.NoError(t, <-done)
			require.Greater(t, wk.Shards().Stats().Commits, base, "the graceful stop commits")
		})
	}
}
