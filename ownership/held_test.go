package ownership_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// TestCountHeld: held counts live leases only: a record held directly, and
// records backed by a live node lease; not a released record, nor a lapsed
// one, nor records whose node lease ended. (It counts from one scan of the
// records now, not one Owner read per id: the same answers.)
func TestCountHeld(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{MinTTL: 100 * time.Millisecond})
	ctx := testutil.Ctx(t, 30*time.Second)
	own := w.Ownership
	count := func() int {
		t.Helper()
		n, err := own.CountHeld(ctx)
		require.NoError(t, err)
		return n
	}
	require.Zero(t, count())

	_, err := own.Claim(ctx, "a", "n1", time.Minute)
	require.NoError(t, err)
	_, err = own.Claim(ctx, "b", "n1", time.Minute)
	require.NoError(t, err)
	require.NoError(t, own.Release(ctx, "b", "n1"))
	_, err = own.Claim(ctx, "lapses", "n1", 100*time.Millisecond)
	require.NoError(t, err)
	ss, err := own.OpenSession(ctx, "n3", time.Minute)
	require.NoError(t, err)
	defer ss.Orphan()
	for _, id := range []string{"c", "d"} {
		_, err := ss.Claim(ctx, id)
		require.NoError(t, err)
	}
	testutil.WaitFor(t, 5*time.Second, "the short lease lapsed", func() bool { return count() == 3 })
	require.Equal(t, 3, count(), "a, and c and d through the live node lease")

	require.NoError(t, ss.CloseContext(ctx))
	require.Equal(t, 1, count(), "the node lease ended: c and d are not held")
}
