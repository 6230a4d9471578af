package world_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// TestCreate_Shards: a sharded world stores each post under its id's
// shard (the server's partition transform agrees with wire.ShardOf), so
// that one filter reads a shard's mail in order and one purge of the
// filter below a sequence removes only that shard's mail up to there.
// Shards outside 0..1024, or with partitions, are refused and create
// nothing.
func TestCreate_Shards(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	ctx := testutil.Ctx(t, 20*time.Second)
	for _, bad := range []world.Config{{Shards: -1}, {Shards: wire.MaxShards + 1}, {Shards: 4, Partitions: 4}} {
		_, err := world.Create(ctx, env.Client.JetStream(), "bad", bad)
		require.ErrorIs(t, err, world.ErrInvalidConfig, "%+v", bad)
		_, err = world.Open(ctx, env.Client.JetStream(), "bad")
		require.ErrorIs(t, err, world.ErrUnknownWorld, "a refused world was created")
	}
	const n = 8
	w := env.World(t, world.Config{Shards: n})
	require.Equal(t, world.KindSharded, w.Config.Kind())
	require.Equal(t, world.KindPerID, world.Config{}.Kind())
	mb := handles.Of(w).Mailbox
	ids := []string{"order-1", "order-2", "a.b>c", "zzz", "ü", "x", "y", "z"}
	seqs := map[string][]uint64{}
	for round := range 2 {
		for _, id := range ids {
			p, err := w.Queue.Send(ctx, id, []byte(id))
			require.NoError(t, err, "round %d", round)
			seqs[id] = append(seqs[id], p.Seq)
		}
	}
	for _, id := range ids {
		for _, seq := range seqs[id] {
			m, err := mb.GetMsg(ctx, seq)
			require.NoError(t, err)
			require.Equal(t, wire.ShardMailboxSubject(w.Name, id, n), m.Subject, "id %q", id)
			got, eid, q, err := wire.ShardedID(w.Name, m.Subject, n)
			require.NoError(t, err)
			require.Equal(t, id, got)
			require.Equal(t, wire.EncodeID(id), eid)
			require.Equal(t, wire.ShardOf(id, n), q)
		}
	}
	// One shard's filter, then a purge of it below the second round.
	q := wire.ShardOf("order-1", n)
	var want []uint64
	for _, id := range ids {
		if wire.ShardOf(id, n) == q {
			want = append(want, seqs[id]...)
		}
	}
	info, err := mb.Info(ctx, jetstream.WithSubjectFilter(wire.ShardFilter(w.Name, q)))
	require.NoError(t, err)
	require.Len(t, info.State.Subjects, len(want)/2)
	err = mb.Purge(ctx, jetstream.WithPurgeSubject(wire.ShardFilter(w.Name, q)), jetstream.WithPurgeSequence(seqs["order-1"][1]))
	require.NoError(t, err)
	for _, id := range ids {
		_, err := mb.GetMsg(ctx, seqs[id][0])
		if wire.ShardOf(id, n) == q {
			require.ErrorIs(t, err, jetstream.ErrMsgNotFound, "id %q of the purged shard", id)
		} else {
			require.NoError(t, err, "id %q of another shard", id)
		}
		_, err = mb.GetMsg(ctx, seqs[id][1])
		require.NoError(t, err, "id %q, second round", id)
	}
}
