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

// TestWorker_CallAnsweredAtTheCommit: a worker answers a call to an id it
// holds as soon as the commit covering it is accepted, without waiting for
// another delivery, its idle release or its parking (both an hour away
// here): the commit a delivery sends without waiting is settled at once
// while answers wait for it. (Settled only by the next delivery, each
// answer waited for the parking: a second per call.)
func TestWorker_CallAnsweredAtTheCommit(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	for _, partitions := range []int{0, 4} {
		t.Run(fmt.Sprint("partitions=", partitions), func(t *testing.T) {
			ctx := testutil.Ctx(t, time.Minute)
			w := env.World(t, world.Config{Partitions: partitions})
			c, err := client.Connect(env.URL)
			require.NoError(t, err)
			defer c.Close()
			cw, err := c.World(ctx, w.Name)
			require.NoError(t, err)
			wk, err := cw.NewWorker(worker.Config{Node: "w1", TTL: 2 * time.Second, Idle: time.Hour}, drain.CallHandler(func(_ context.Context, m drain.Message) ([]byte, error) {
				return append([]byte("re:"), m.Body...), nil
			}).Handler())
			require.NoError(t, err)
			worker.SetParkAfter(wk, time.Hour)
			rctx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- wk.Run(rctx) }()
			defer func() {
				stop()
				require.NoError(t, <-done)
			}()
			// The first call is delivered by the claim's first drain.
			_, err = w.Call(ctx, "a", []byte("0"))
			require.NoError(t, err)
			for i := 1; i <= 5; i++ {
				cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				a, err := w.Call(cctx, "a", fmt.Append(nil, i))
				cancel()
				require.NoError(t, err, "call %d", i)
				require.Equal(t, fmt.Sprint("re:", i), string(a.Body))
			}
		})
	}
}
