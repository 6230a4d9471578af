package shard_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/shard"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// heldShard is a world of 2 shards whose shard 1 node "a" holds through a
// session of its own, and a holder of it outside any worker's Run.
func heldShard(ctx context.Context, t *testing.T) (*client.World, *ownership.Lease, shard.TestHolder) {
	t.Helper()
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{Shards: 2})
	wk, err := shard.New(w.World, w.Ownership, shard.Config{Node: "a"}, func(context.Context, drain.Message) error { return nil })
	require.NoError(t, err)
	ss, err := w.Ownership.AcquireSession(ctx, "a", 10*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ss.Close() })
	l, err := ss.Claim(ctx, wire.ShardUnit(1))
	require.NoError(t, err)
	return w, l, shard.NewTestHolder(ctx, wk, 1, l)
}

// TestHolder_CommitFencedAfterSeize: a holder whose shard was seized (a
// forced seize, as a paused holder's would be after its lapse) cannot
// commit: the broker refuses its cursor (errLost), and the stored cursor
// is the one the holder committed before the seize, whatever the holder's
// clock says (its session is still live here).
func TestHolder_CommitFencedAfterSeize(t *testing.T) {
	ctx := testutil.Ctx(t, 30*time.Second)
	w, l, h := heldShard(ctx, t)

	require.NoError(t, h.Commit(wire.ShardCursor{Seq: 10}))
	_, err := w.Ownership.Seize(ctx, wire.ShardUnit(1), "b", 10*time.Second, true)
	require.NoError(t, err)
	require.True(t, l.Valid(), "the holder's own clock still lets it act")
	err = h.Commit(wire.ShardCursor{Seq: 20})
	require.True(t, errors.Is(err, shard.ErrLost), "got %v", err)

	c, err := h.ReadCursor()
	require.NoError(t, err)
	require.Equal(t, uint64(10), c.Seq, "the refused commit stored nothing")
}

// TestHolder_RefusedOverItsOwnRecord: commits refused while the shard's
// record still names the holding (here rewritten as it was before each
// one) are made again at the record's revision, and stored, up to 8 in a
// row; the 9th refusal fails the holding, and not as lost (a failed
// holding's worker releases its shard; a lost one's is left to its new
// holder).
func TestHolder_RefusedOverItsOwnRecord(t *testing.T) {
	ctx := testutil.Ctx(t, 30*time.Second)
	w, _, h := heldShard(ctx, t)
	kv := handles.Of(w.World).KV
	rewrite := func() {
		rec, err := kv.Get(ctx, wire.RecordKey(wire.ShardUnit(1)))
		require.NoError(t, err)
		_, err = kv.Put(ctx, wire.RecordKey(wire.ShardUnit(1)), rec.Value())
		require.NoError(t, err)
	}

	rewrite()
	require.NoError(t, h.Commit(wire.ShardCursor{Seq: 1}), "refused: made again at the next tick")
	require.NoError(t, h.Commit(wire.ShardCursor{Seq: 1}), "stored at the record's revision now")
	c, err := h.ReadCursor()
	require.NoError(t, err)
	require.Equal(t, uint64(1), c.Seq)

	for i := range 8 {
		rewrite()
		require.NoError(t, h.Commit(wire.ShardCursor{Seq: 2}), "refusal %d in a row", i+1)
	}
	rewrite()
	err = h.Commit(wire.ShardCursor{Seq: 2})
	require.Error(t, err, "the 9th refusal in a row")
	require.False(t, errors.Is(err, shard.ErrLost), "failed, not lost: %v", err)
	c, err = h.ReadCursor()
	require.NoError(t, err)
	require.Equal(t, uint64(1), c.Seq, "nothing refused was stored")
}
