package shard_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// TestShards_Calls: a call to an id of a sharded world is answered by its
// shard's holder once a commit covers it (replied, with the handler's
// answer); one whose handler always fails is answered failed, with the
// last error, after max_deliveries; a handler that does not reply answers
// with an empty body. Before, a call there timed out.
func TestShards_Calls(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{Shards: 4, MaxDeliveries: 2})
	ctx := testutil.Ctx(t, time.Minute)
	pool(t, w, 1, 2*time.Second, func(_ context.Context, m drain.Message) error {
		switch string(m.Body) {
		case "fail":
			return errors.New("no such order")
		case "quiet":
			return nil
		}
		return m.Reply([]byte("re:" + string(m.Body)))
	})
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	a, err := w.Call(cctx, "order-1", []byte("status?"))
	require.NoError(t, err)
	require.Equal(t, "re:status?", string(a.Body))

	a, err = w.Call(cctx, "order-2", []byte("quiet"))
	require.NoError(t, err)
	require.Empty(t, a.Body)

	_, err = w.Call(cctx, "order-3", []byte("fail"))
	var failed *client.CallFailedError
	require.ErrorAs(t, err, &failed)
	require.Contains(t, failed.Err, "no such order")
}
