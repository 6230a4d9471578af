package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/fencing"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/worker"
	"github.com/fencepost/fencepost/world"
)

// TestWorker_SelfFenceStopsDrains: while a handler runs, the worker's node
// lease record is deleted or replaced. The worker self-fences with the
// record's cause, the handler's context is cancelled, nothing is
// committed, and the message is still in the mailbox for the next owner.
func TestWorker_SelfFenceStopsDrains(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cause fencing.Cause
	}{
		{"node lease deleted", fencing.CauseRecordMissing},
		{"node lease replaced", fencing.CauseRecordMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := testutil.Start(t, testutil.Targets()[0])
			w := env.World(t, world.Config{})
			ctx := testutil.Ctx(t, time.Minute)
			started, stopped := make(chan struct{}), make(chan error, 1)
			wk, err := w.NewWorker(worker.Config{Node: "n", TTL: time.Second, IDs: []string{"x"}}, func(hctx context.Context, m drain.Message) error {
				close(started)
				<-hctx.Done() // a long handler: only the fence stops it
				stopped <- context.Cause(hctx)
				return hctx.Err()
			})
			require.NoError(t, err)
			done := make(chan error, 1)
			go func() { done <- wk.Run(ctx) }()
			_, err = w.Queue.Send(ctx, "x", []byte("m"))
			require.NoError(t, err)
			select {
			case <-started:
			case <-time.After(10 * time.Second):
				t.Fatal("handler not started")
			}
			key := wire.NodeKey("n")
			if tc.cause == fencing.CauseRecordMissing {
				require.NoError(t, handles.Of(w).KV.Delete(ctx, key))
			} else {
				_, err := handles.Of(w).KV.Put(ctx, key, []byte(`{"v":1,"node":"n","epoch":77,"state":"held","ttl_ms":60000,"acquired":"2026-01-01T00:00:00Z","expires":"2099-01-01T00:00:00Z"}`))
				require.NoError(t, err)
			}
			select {
			case err := <-done:
				require.ErrorIs(t, err, tc.cause)
			case <-time.After(10 * time.Second):
				t.Fatal("the worker did not self-fence")
			}
			select {
			case err := <-stopped:
				require.Error(t, err, "the handler's context was cancelled")
			case <-time.After(5 * time.Second):
				t.Fatal("the handler was not stopped")
			}
			st, err := w.Mailboxes.Stat(ctx, "x")
			require.NoError(t, err)
			require.EqualValues(t, 1, st.Depth, "nothing was committed after the fence")
			require.Zero(t, st.Cursor)
		})
	}
}
