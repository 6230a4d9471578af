package ownership_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// TestOwnership_EpochsExhausted: over a record at epoch 2^64-1 a claim or
// seize has no next epoch (it would wrap to 0). Each refuses with
// ErrEpochsExhausted, saying so, and writes nothing; Owner still reads the
// record.
func TestOwnership_EpochsExhausted(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{})
	ctx := testutil.Ctx(t, time.Minute)
	past := time.Now().Add(-time.Hour)
	put := func(id string, r wire.Record) uint64 {
		b, err := wire.EncodeRecord(r)
		require.NoError(t, err)
		rev, err := handles.Of(w).KV.Put(ctx, wire.RecordKey(id), b)
		require.NoError(t, err)
		return rev
	}
	freeRev := put("free", wire.Record{Epoch: math.MaxUint64, State: wire.StateFree, Acquired: past, Expires: past})
	lapsedRev := put("lapsed", wire.Record{Node: "old", Epoch: math.MaxUint64, State: wire.StateHeld, TTLms: 1000, Acquired: past, Expires: past.Add(time.Second)})

	for _, tc := range []struct {
		name, id string
		rev      uint64
		op       func() error
	}{
		{"claim", "free", freeRev, func() error { _, err := w.Ownership.Claim(ctx, "free", "n1", 0); return err }},
		{"claim lapsed", "lapsed", lapsedRev, func() error { _, err := w.Ownership.Claim(ctx, "lapsed", "n1", 0); return err }},
		{"seize", "lapsed", lapsedRev, func() error { _, err := w.Ownership.Seize(ctx, "lapsed", "n1", 0, false); return err }},
		{"seize force", "lapsed", lapsedRev, func() error { _, err := w.Ownership.Seize(ctx, "lapsed", "n1", 0, true); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.op()
			require.ErrorIs(t, err, ownership.ErrEpochsExhausted)
			require.NotErrorIs(t, err, wire.ErrCorruptRecord)
			require.Contains(t, err.Error(), "epochs exhausted")
			require.Contains(t, err.Error(), "18446744073709551615")
			e, err := handles.Of(w).KV.Get(ctx, wire.RecordKey(tc.id))
			require.NoError(t, err)
			require.Equal(t, tc.rev, e.Revision(), "the refusal wrote the record")
			st, err := w.Ownership.Owner(ctx, tc.id)
			require.NoError(t, err)
			require.False(t, st.Held)
			require.Equal(t, uint64(math.MaxUint64), st.Epoch)
		})
	}
	t.Run("node lease", func(t *testing.T) {
		b, err := wire.EncodeRecord(wire.Record{Node: "nl", Epoch: math.MaxUint64, State: wire.StateHeld, TTLms: 1000, Acquired: past, Expires: past.Add(time.Second)})
		require.NoError(t, err)
		rev, err := handles.Of(w).KV.Put(ctx, wire.NodeKey("nl"), b)
		require.NoError(t, err)
		_, err = w.Ownership.OpenSession(ctx, "nl", 0)
		require.ErrorIs(t, err, ownership.ErrEpochsExhausted)
		e, err := handles.Of(w).KV.Get(ctx, wire.NodeKey("nl"))
		require.NoError(t, err)
		require.Equal(t, rev, e.Revision())
	})
}
