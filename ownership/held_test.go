package ownership_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/ownership"
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

// TestCountRecords: records (held or free), live holders (plain and backed
// by a node lease), acquisitions (the sum of the epochs) and records that
// do not decode, from one scan. These were world.Inspect's, read with a
// decoder of its own; ownership judges its records alone now.
func TestCountRecords(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{})
	ctx := testutil.Ctx(t, 30*time.Second)
	own := w.Ownership
	count := func() ownership.RecordCounts {
		t.Helper()
		c, err := own.CountRecords(ctx)
		require.NoError(t, err)
		return c
	}
	require.Equal(t, ownership.RecordCounts{}, count())

	_, err := own.Claim(ctx, "a", "n1", time.Minute)
	require.NoError(t, err)
	_, err = own.Seize(ctx, "a", "n2", time.Minute, true) // epoch 2
	require.NoError(t, err)
	_, err = own.Claim(ctx, "b", "n1", time.Minute)
	require.NoError(t, err)
	require.NoError(t, own.Release(ctx, "b", "n1")) // free, epoch 1
	ss, err := own.OpenSession(ctx, "n3", time.Minute)
	require.NoError(t, err)
	defer ss.Orphan()
	for _, id := range []string{"c", "d"} {
		_, err := ss.Claim(ctx, id)
		require.NoError(t, err)
	}
	require.Equal(t, ownership.RecordCounts{Records: 4, Owned: 3, Acquisitions: 2 + 1 + 1 + 1}, count(), "a, and c and d through the live node lease")

	// A record that does not decode is counted as such, and nothing more.
	_, err = handles.Of(w).KV.Put(ctx, wire.RecordKey("e"), []byte("{garbage"))
	require.NoError(t, err)
	require.Equal(t, ownership.RecordCounts{Records: 5, Owned: 3, Acquisitions: 5, Unreadable: 1}, count())

	// The node lease ends: the ids it backed are no longer owned.
	require.NoError(t, ss.CloseContext(ctx))
	require.Equal(t, ownership.RecordCounts{Records: 5, Owned: 1, Acquisitions: 5, Unreadable: 1}, count())
}
