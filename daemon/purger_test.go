package daemon_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// TestDaemon_PurgerRefusalsInMetrics: fencepostd's purger of a purge=server
// world counts the cursor entries it refuses, a key that names no id
// (c.* with a literal '*') and a cursor above the mailbox stream, in
// /metrics, and purges nothing for them.
func TestDaemon_PurgerRefusalsInMetrics(t *testing.T) {
	s := startDaemon(t, t.TempDir())
	c, _ := connect(t, s)
	ctx := testutil.Ctx(t, 30*time.Second)
	w, err := c.CreateWorld(ctx, "pw", world.Config{Purge: world.PurgeByServer})
	require.NoError(t, err)
	for range 3 {
		_, err := w.Queue.Send(ctx, "a", []byte("x"))
		require.NoError(t, err)
	}
	_, err = handles.Of(w).JS.Publish(ctx, wire.KeySubject("pw", wire.CursorPrefix+"*"), []byte(`{"v":1,"seq":1000000}`))
	require.NoError(t, err)
	_, err = handles.Of(w).JS.Publish(ctx, wire.KeySubject("pw", wire.CursorKey("a")), []byte(`{"v":1,"seq":`+strconv.Itoa(1003)+`}`))
	require.NoError(t, err)
	s.waitMetric(t, `fencepost_purger_bad_cursor_keys_total{world="pw"}`, 1)
	s.waitMetric(t, `fencepost_purger_forged_cursors_total{world="pw"}`, 1)
	info, err := handles.Of(w).Mailbox.Info(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 3, info.State.Msgs, "nothing purged")
}

// TestDaemon_SweepsFiredTimers: fencepostd removes a fired timer's copy
// from the world's timer stream once the mailbox stream took it in (it was
// left there until `fencepost timer sweep`), and the message it became
// stays in the mailbox.
func TestDaemon_SweepsFiredTimers(t *testing.T) {
	s := startDaemon(t, t.TempDir())
	c, _ := connect(t, s)
	ctx := testutil.Ctx(t, 30*time.Second)
	w, err := c.CreateWorld(ctx, "tw", world.Config{})
	require.NoError(t, err)
	_, err = w.Send(ctx, "a", []byte("later"), client.WithAfter(300*time.Millisecond))
	require.NoError(t, err)
	testutil.WaitFor(t, 10*time.Second, "the timer fired into the mailbox", func() bool {
		info, err := handles.Of(w).Mailbox.Info(ctx)
		require.NoError(t, err)
		return info.State.Msgs == 1
	})
	testutil.WaitFor(t, 10*time.Second, "the fired copy swept", func() bool {
		ts, err := handles.Of(w).JS.Stream(ctx, wire.TimerStream("tw"))
		require.NoError(t, err)
		info, err := ts.Info(ctx, jetstream.WithSubjectFilter(wire.FiredFilter("tw")))
		require.NoError(t, err)
		return len(info.State.Subjects) == 0
	})
}
