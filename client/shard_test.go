package client_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// TestWorld_Unit: in a per-id world an id's unit is the id; in a sharded
// world it is its shard's, so that two ids of one shard share one record:
// the second's claim is held-by the first's node, at the same epoch. Ids
// of other shards are independent. A shard named directly is refused in a
// per-id world and out of range; an id that is not one is refused in both.
func TestWorld_Unit(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	ctx := testutil.Ctx(t, 30*time.Second)
	perID := env.World(t, world.Config{})
	u, err := perID.Unit("order.42")
	require.NoError(t, err)
	require.Equal(t, client.Unit{Name: "order.42", Shard: -1}, u)
	require.False(t, u.Sharded())
	_, err = perID.ShardUnit(0)
	require.ErrorIs(t, err, client.ErrPerIDWorld)
	_, err = perID.Unit("")
	require.ErrorIs(t, err, wire.ErrInvalidID)
	_, err = perID.ListShards(ctx, client.ShardListOptions{Limit: 1})
	require.ErrorIs(t, err, client.ErrPerIDWorld)

	const n = 8
	w := env.World(t, world.Config{Shards: n})
	require.Equal(t, n, w.Shards())
	byShard := map[int][]string{}
	for i := range 100 {
		id := fmt.Sprintf("order-%d", i)
		u, err := w.Unit(id)
		require.NoError(t, err)
		require.Equal(t, wire.ShardOf(id, n), u.Shard)
		require.Equal(t, wire.ShardUnit(u.Shard), u.Name)
		byShard[u.Shard] = append(byShard[u.Shard], id)
	}
	_, err = w.Unit("")
	require.ErrorIs(t, err, wire.ErrInvalidID)
	for _, q := range []int{-1, n, wire.MaxShards} {
		_, err = w.ShardUnit(q)
		require.ErrorIs(t, err, wire.ErrInvalidID, "shard %d", q)
	}

	var same []string
	var q int
	for q = range n {
		if len(byShard[q]) >= 2 {
			same = byShard[q]
			break
		}
	}
	require.NotNil(t, same)
	ua, _ := w.Unit(same[0])
	ub, _ := w.Unit(same[1])
	l, err := w.Ownership.Claim(ctx, ua.Name, "n1", time.Minute)
	require.NoError(t, err)
	_, err = w.Ownership.Claim(ctx, ub.Name, "n2", time.Minute)
	var held *ownership.HeldError
	require.ErrorAs(t, err, &held, "one record for the ids of one shard")
	require.Equal(t, "n1", held.Node)
	require.Equal(t, l.Epoch, held.Epoch)
	other := (q + 1) % n
	uo, err := w.ShardUnit(other)
	require.NoError(t, err)
	lo, err := w.Ownership.Claim(ctx, uo.Name, "n2", time.Minute)
	require.NoError(t, err, "another shard is free")
	require.EqualValues(t, 1, lo.Epoch)

	page, err := w.ListShards(ctx, client.ShardListOptions{Limit: n})
	require.NoError(t, err)
	require.Len(t, page.Entries, n)
	require.False(t, page.More)
	for i, e := range page.Entries {
		require.Equal(t, i, e.Shard)
		require.Equal(t, i == q || i == other, e.Owner.Held, "shard %d", i)
	}
	page, err = w.ListShards(ctx, client.ShardListOptions{HeldBy: "n2", Limit: n})
	require.NoError(t, err)
	require.Len(t, page.Entries, 1)
	require.Equal(t, other, page.Entries[0].Shard)
	page, err = w.ListShards(ctx, client.ShardListOptions{From: 3, Limit: 2})
	require.NoError(t, err)
	require.Len(t, page.Entries, 2)
	require.Equal(t, 3, page.Entries[0].Shard)
	require.True(t, page.More)
	page, err = w.ListShards(ctx, client.ShardListOptions{From: n - 2, Limit: 2})
	require.NoError(t, err)
	require.Len(t, page.Entries, 2)
	require.False(t, page.More, "the last page")
}
