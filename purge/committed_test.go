package purge_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/server/servertest"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// TestPurgeByServer: in a world with purge=server, drains remove nothing
// themselves; the server's purger removes exactly what the stored cursors
// cover, and the next drain starts after the cursor, so nothing is
// delivered twice.
func TestPurgeByServer(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	ctx := testutil.Ctx(t, 30*time.Second)
	w, d := newWorld(t, env, world.Config{Purge: world.PurgeByServer})
	a, b := wire.MailboxSubject(w.Name, "a"), wire.MailboxSubject(w.Name, "b")
	for i := range 5 {
		send(t, ctx, w, "a", fmt.Sprint(i))
		send(t, ctx, w, "b", fmt.Sprint(i))
	}
	la, err := w.Ownership.Claim(ctx, "a", "n1", time.Minute)
	require.NoError(t, err)
	lb, err := w.Ownership.Claim(ctx, "b", "n1", time.Minute)
	require.NoError(t, err)
	rec := &testutil.Recorder{}
	_, err = d.DrainLease(ctx, la, rec.Handle, drain.WithMax(3))
	require.NoError(t, err)
	_, err = d.DrainLease(ctx, lb, rec.Handle)
	require.NoError(t, err)
	require.Len(t, rec.Bodies(), 8)
	require.EqualValues(t, 5, stored(t, w, a), "the drain purged nothing")
	require.EqualValues(t, 5, stored(t, w, b), "the second drain purged nothing")

	pctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	p := newPurger(t, w)
	go func() { done <- p.PurgeCommitted(pctx) }()
	servertest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if n, m := stored(t, w, a), stored(t, w, b); n != 2 || m != 0 {
			return fmt.Errorf("stored a=%d (want 2: 3 committed), b=%d (want 0)", n, m)
		}
		return nil
	})
	// New commits while it runs are purged too.
	_, err = d.DrainLease(ctx, la, rec.Handle)
	require.NoError(t, err)
	servertest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if n := stored(t, w, a); n != 0 {
			return fmt.Errorf("stored a=%d, want 0", n)
		}
		return nil
	})
	require.Len(t, rec.Bodies(), 10, "every message once")
	stop()
	require.NoError(t, <-done)
}
