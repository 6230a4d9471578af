package ownership_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/testkit/testutil"
)

// TestLease_PriorUntil: a lease says when an earlier holder may still have
// had messages (it lapsed, or was seized from), and only then: a new id, a
// released one and a renewal have none.
func TestLease_PriorUntil(t *testing.T) {
	suite(t, func(t *testing.T, env *testutil.Env, w *client.World) {
		ctx := testutil.Ctx(t, time.Minute)
		s := w.Ownership
		l, err := s.Claim(ctx, "new", "a", time.Minute)
		require.NoError(t, err)
		require.True(t, l.PriorUntil.IsZero(), "a new id had no holder")
		require.NoError(t, s.Release(ctx, "new", "a"))
		l, err = s.Claim(ctx, "new", "b", time.Minute)
		require.NoError(t, err)
		require.True(t, l.PriorUntil.IsZero(), "a released id's holder committed before it let go")

		_, err = s.Claim(ctx, "lapsed", "a", short)
		require.NoError(t, err)
		waitLapse(t, ctx, s, "lapsed")
		before := time.Now()
		l, err = s.Claim(ctx, "lapsed", "b", time.Minute)
		require.NoError(t, err)
		require.False(t, l.PriorUntil.IsZero(), "a claim over a lapsed holder")
		require.False(t, l.PriorUntil.Before(before), "prior holder's messages bound %v before the claim %v", l.PriorUntil, before)

		l, err = s.Seize(ctx, "lapsed", "c", time.Minute, true)
		require.NoError(t, err)
		require.False(t, l.PriorUntil.IsZero(), "a forced seize takes from a live holder")

		ss, err := s.AcquireSession(ctx, "n", time.Minute)
		require.NoError(t, err)
		defer ss.Close()
		_, err = s.Claim(ctx, "viasession", "a", short)
		require.NoError(t, err)
		waitLapse(t, ctx, s, "viasession")
		l, err = ss.Claim(ctx, "viasession")
		require.NoError(t, err)
		require.False(t, l.PriorUntil.IsZero(), "a session's claim over a lapsed holder")
		l, err = ss.Claim(ctx, "fresh")
		require.NoError(t, err)
		require.True(t, l.PriorUntil.IsZero())
	})
}
