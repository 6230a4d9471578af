package ownership_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/fencing"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// waitDone waits for a keeper's Done with a deadline and returns when it
// closed.
func waitDone(t *testing.T, done <-chan struct{}, total time.Duration) time.Time {
	t.Helper()
	select {
	case <-done:
		return time.Now()
	case <-time.After(total):
		t.Fatalf("Done not closed after %v", total)
		return time.Time{}
	}
}

func TestKeeper_RenewsAndReleases(t *testing.T) {
	suite(t, func(t *testing.T, _ *testutil.Env, w *client.World) {
		ctx := testutil.Ctx(t, time.Minute)
		const ttl = 600 * time.Millisecond
		l, err := w.Ownership.Claim(ctx, "kept", "a", ttl)
		require.NoError(t, err)
		k, err := w.Ownership.Keep(l)
		require.NoError(t, err)
		defer k.Close()

		// Renewed at ttl/3: after 3 renewals the first term is long over,
		// and the record still names a at the claimed epoch.
		testutil.WaitFor(t, 5*time.Second, "3 renewals", func() bool { return k.Renewals() >= 3 })
		require.True(t, time.Now().After(l.Expires), "three renewals at ttl/3 outlast the first term")
		require.NoError(t, k.Err())
		cur := k.Lease()
		require.True(t, cur.Valid())
		require.Equal(t, l.Epoch, cur.Epoch)
		require.Greater(t, cur.Revision, l.Revision, "the fence follows each renewal")
		st, err := w.Ownership.Guard(ctx, "kept", "a", l.Epoch)
		require.NoError(t, err)
		require.True(t, st.Held)

		require.NoError(t, k.Release(ctx))
		waitDone(t, k.Done(), time.Second)
		require.ErrorIs(t, k.Err(), ownership.ErrClosed)
		require.Empty(t, k.Cause())
		require.ErrorIs(t, context.Cause(k.Context()), ownership.ErrClosed)
		st, err = w.Ownership.Owner(ctx, "kept")
		require.NoError(t, err)
		require.False(t, st.Held)
		require.Equal(t, l.Epoch, st.Epoch)
		require.NoError(t, k.Close(), "Close after Release is a no-op")
	})
}

// TestKeeper_SelfFence provokes each cause for real against the server.
func TestKeeper_SelfFence(t *testing.T) {
	// Long enough that a loaded machine renews well inside the authority:
	// the cause must be the record's, not the watchdog's.
	const ttl = time.Second
	t.Run("record deleted", func(t *testing.T) {
		suite(t, func(t *testing.T, _ *testutil.Env, w *client.World) {
			ctx := testutil.Ctx(t, time.Minute)
			l, err := w.Ownership.Claim(ctx, "del", "a", ttl)
			require.NoError(t, err)
			k, err := w.Ownership.Keep(l)
			require.NoError(t, err)
			defer k.Close()
			require.NoError(t, handles.Of(w).KV.Delete(ctx, wire.RecordKey("del")))
			waitDone(t, k.Done(), 5*time.Second)
			require.Equal(t, fencing.CauseRecordMissing, k.Cause())
			require.ErrorIs(t, context.Cause(k.Context()), fencing.CauseRecordMissing)
			require.False(t, k.Lease().Valid(), "a fenced lease is not valid")
		})
	})
	t.Run("record replaced by a forced seize", func(t *testing.T) {
		suite(t, func(t *testing.T, _ *testutil.Env, w *client.World) {
			ctx := testutil.Ctx(t, time.Minute)
			l, err := w.Ownership.Claim(ctx, "mm", "a", ttl)
			require.NoError(t, err)
			k, err := w.Ownership.Keep(l)
			require.NoError(t, err)
			defer k.Close()
			// Same node name, new epoch: only the epoch tells it apart.
			_, err = w.Ownership.Seize(ctx, "mm", "a", time.Minute, true)
			require.NoError(t, err)
			waitDone(t, k.Done(), 5*time.Second)
			require.Equal(t, fencing.CauseRecordMismatch, k.Cause())
			require.ErrorIs(t, k.Release(ctx), fencing.CauseRecordMismatch)
		})
	})
	t.Run("renewals blocked until expiry", func(t *testing.T) {
		const ttl = 300 * time.Millisecond
		env := testutil.Start(t, testutil.Targets()[0])
		w := env.World(t, world.Config{})
		ctx := testutil.Ctx(t, time.Minute)
		l, err := w.Ownership.Claim(ctx, "wd", "a", ttl)
		require.NoError(t, err)
		k, err := w.Ownership.Keep(l)
		require.NoError(t, err)
		defer k.Close()
		testutil.WaitFor(t, 5*time.Second, "a first renewal", func() bool { return k.Renewals() >= 1 })
		env.Node.Server.Stop() // nothing can be renewed any more
		vu := k.ValidUntil()
		at := waitDone(t, k.Done(), 5*time.Second)
		require.Equal(t, fencing.CauseWatchdog, k.Cause())
		require.False(t, at.Before(vu), "fenced at %v, before its authority ended at %v", at, vu)
		require.Less(t, at.Sub(vu), 250*time.Millisecond, "fenced late")
		require.False(t, k.Lease().Valid())
	})
}

func TestKeeper_RefusesBackedLease(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{})
	ctx := testutil.Ctx(t, time.Minute)
	ss, err := w.Ownership.OpenSession(ctx, "n", time.Second)
	require.NoError(t, err)
	defer ss.Orphan()
	l, err := ss.Claim(ctx, "x")
	require.NoError(t, err)
	_, err = w.Ownership.Keep(l)
	require.ErrorIs(t, err, ownership.ErrInvalidOption)
}

// TestKeeper_AdoptsRewriteByHolder: another writer rewrites the record but
// keeps the holder and epoch (an operator's renew, a drain's takeover
// fence): the keeper adopts the revision and goes on, it does not fence.
func TestKeeper_AdoptsRewriteByHolder(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{})
	ctx := testutil.Ctx(t, time.Minute)
	l, err := w.Ownership.Claim(ctx, "ad", "a", 600*time.Millisecond)
	require.NoError(t, err)
	k, err := w.Ownership.Keep(l)
	require.NoError(t, err)
	defer k.Close()
	other, err := env.Client.World(ctx, w.Name)
	require.NoError(t, err)
	r, err := other.Ownership.Renew(ctx, "ad", "a", 600*time.Millisecond)
	require.NoError(t, err)
	before := k.Renewals()
	testutil.WaitFor(t, 5*time.Second, "two renewals after the rewrite", func() bool { return k.Renewals() >= before+2 })
	require.NoError(t, k.Err())
	require.Greater(t, k.Fence().Revision, r.Revision)
	require.Equal(t, l.Epoch, k.Fence().Epoch)
}
