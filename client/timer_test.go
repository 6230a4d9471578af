package client_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/queue"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// TestTimer_Refusals: a user that may post but not publish on the timer
// subjects is told at once that its timer was refused and nothing was
// stored (not an unknown outcome at the timeout), whatever the timer's
// key; its plain posts go on. TimerStat, for a user that may not read
// the timer stream, is refused at once, and the refusal does not end the
// client's other operations.
func TestTimer_Refusals(t *testing.T) {
	inboxes := []string{"_INBOX.>"}
	u := testutil.StartUsers(t, map[string]*natsserver.Permissions{
		"admin":  nil,
		"poster": testutil.Allow([]string{"$JS.API.STREAM.INFO.>", "$JS.API.DIRECT.GET.KV_fp_w.>", "$JS.API.DIRECT.GET.KV_fp_w", "fp.w.mb.*"}, inboxes),
	})
	ctx := testutil.Ctx(t, time.Minute)
	_, err := connectAs(t, u, "admin").CreateWorld(ctx, "w", world.Config{})
	require.NoError(t, err)
	c := connectAs(t, u, "poster")
	w, err := c.World(ctx, "w")
	require.NoError(t, err)
	var others atomic.Int32
	stop := c.OnRefusal(func(*client.NotPermittedError) { others.Add(1) })
	defer stop()
	for _, opts := range [][]queue.SendOption{
		{client.WithAfter(time.Hour)},
		{client.WithAfter(time.Hour), client.WithTimerKey("k")},
	} {
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		start := time.Now()
		_, err = w.Send(sctx, "a", []byte("x"), opts...)
		cancel()
		require.ErrorIs(t, err, client.ErrNotPermitted)
		require.ErrorContains(t, err, "nothing was stored")
		require.Less(t, time.Since(start), 10*time.Second, "answered at the refusal, not at the timeout")
	}
	_, err = w.Send(ctx, "a", []byte("a post"))
	require.NoError(t, err)

	start := time.Now()
	_, err = w.TimerStat(ctx, "")
	require.ErrorIs(t, err, client.ErrNotPermitted)
	require.Less(t, time.Since(start), 10*time.Second)
	require.Zero(t, others.Load(), "expected refusals reach no watcher")
}
