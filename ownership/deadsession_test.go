package ownership_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// TestTakeover_DeadSessionReadOnce: after a node dies, taking its ids
// over reads its node lease once (the first takeover retires it), not once
// per id; and after a reset, which starts node lease epochs at 1 again, a
// live session at an epoch seen dead before the reset is read, not taken
// for dead.
func TestTakeover_DeadSessionReadOnce(t *testing.T) {
	suite(t, func(t *testing.T, env *testutil.Env, w *client.World) {
		ctx := testutil.Ctx(t, time.Minute)
		ttl := 300 * time.Millisecond
		a, err := env.Client.World(ctx, w.Name) // node a's own store
		require.NoError(t, err)
		ss, err := a.Ownership.AcquireSession(ctx, "a", ttl)
		require.NoError(t, err)
		ids := []string{"x", "y", "z"}
		for _, id := range ids {
			_, err := ss.Claim(ctx, id)
			require.NoError(t, err)
		}
		require.NoError(t, ss.Orphan()) // a dies: its lease lapses
		b := w.Ownership
		testutil.WaitFor(t, 10*time.Second, "a's ids lapse", func() bool {
			st, err := b.Owner(ctx, "x")
			return err == nil && !st.Held
		})
		before := ownership.NodeReads(b)
		l, err := b.Claim(ctx, "x", "b", time.Minute)
		require.NoError(t, err)
		require.Equal(t, uint64(2), l.Epoch)
		first := ownership.NodeReads(b) - before
		require.Positive(t, first, "the first takeover reads a's node lease")
		for _, id := range ids[1:] {
			_, err := b.Claim(ctx, id, "b", time.Minute)
			require.NoError(t, err)
		}
		require.Equal(t, first, ownership.NodeReads(b)-before, "later takeovers of the dead session's ids read its node lease again")

		// A reset starts epochs at 1 again: a's new session is at the
		// epoch b saw dead, and its claim is live.
		require.NoError(t, world.Reset(ctx, handles.Of(w).JS, w.Name))
		ss2, err := a.Ownership.AcquireSession(ctx, "a", time.Minute)
		require.NoError(t, err)
		defer ss2.Close()
		require.Equal(t, ss.Epoch(), ss2.Epoch(), "the same session epoch after the reset")
		_, err = ss2.Claim(ctx, "x")
		require.NoError(t, err)
		_, err = b.Claim(ctx, "x", "b", time.Minute)
		require.ErrorIs(t, err, ownership.ErrHeld, "a live session taken for the dead one before the reset")
	})
}
