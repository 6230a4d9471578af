package purge_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/server/servertest"
	"github.com/fencepost/fencepost/shard"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// storedShard counts the messages stored for shard q of w.
func storedShard(t *testing.T, w *client.World, q int) uint64 {
	t.Helper()
	info, err := handles.Of(w).Mailbox.Info(context.Background(), jetstream.WithSubjectFilter(wire.ShardFilter(w.Name, q)))
	require.NoError(t, err)
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n
}

// TestPurger_ShardedWorld: in a sharded world of purge=server (fencepostd
// --auth), the shards' holders purge nothing, and the purger removes each
// shard's mail below its stored cursor's Low, and nothing of another
// shard. A shard cursor above the stream's last sequence is refused and
// repaired, and a cursor key that names no shard of the world (an id's, a
// shard it does not have) is refused: nothing is purged for either.
func TestPurger_ShardedWorld(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	ctx := testutil.Ctx(t, 30*time.Second)
	w, d := newWorld(t, env, world.Config{Shards: 2, Purge: world.PurgeByServer})
	// Two ids of each shard, 5 messages each.
	byShard := map[int][]string{}
	for i := 0; len(byShard[0]) < 2 || len(byShard[1]) < 2; i++ {
		id := fmt.Sprint("id-", i)
		if q := wire.ShardOf(id, 2); len(byShard[q]) < 2 {
			byShard[q] = append(byShard[q], id)
		}
	}
	for r := range 5 {
		for q := range 2 {
			for _, id := range byShard[q] {
				send(t, ctx, w, id, fmt.Sprint(r))
			}
		}
	}
	unit := wire.ShardUnit(0)
	l, err := w.Ownership.Claim(ctx, unit, "n1", time.Minute)
	require.NoError(t, err)
	rec := &testutil.Recorder{}
	res, err := shard.Drain(ctx, w.World, w.Ownership, d, 0, "n1", l.Epoch, rec.Handle, shard.DrainOptions{Max: 4})
	require.NoError(t, err)
	require.Equal(t, 4, res.Count)
	require.Equal(t, uint64(10), storedShard(t, w, 0), "the holder of a purge=server world purges nothing")

	var r refusals
	runPurger(t, ctx, w, r.option())
	servertest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if n, m := storedShard(t, w, 0), storedShard(t, w, 1); n != 6 || m != 10 {
			return fmt.Errorf("stored shard 0: %d (want 6: 4 committed), shard 1: %d (want 10)", n, m)
		}
		return nil
	})

	forged := mailboxLastSeq(t, ctx, w) + 1000
	for _, key := range []string{wire.CursorKey(wire.ShardUnit(1)), wire.CursorKey(byShard[1][0]), wire.CursorKey(wire.ShardUnit(2))} {
		_, err := handles.Of(w).JS.Publish(ctx, wire.KeySubject(w.Name, key), []byte(`{"v":1,"seq":`+strconv.FormatUint(forged, 10)+`}`))
		require.NoError(t, err)
	}
	servertest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if f, b := r.forged.Load(), r.badKeys.Load(); f != 1 || b != 2 {
			return fmt.Errorf("forged %d (want 1: shard 1's), bad keys %d (want 2: an id's, shard 2's)", f, b)
		}
		return nil
	})
	_, err = handles.Of(w).KV.Get(ctx, wire.CursorKey(wire.ShardUnit(1)))
	require.ErrorIs(t, err, jetstream.ErrKeyNotFound, "the forged cursor is deleted (none seen before it)")
	require.Equal(t, uint64(10), storedShard(t, w, 1), "nothing purged for a forged cursor")

	// The rest of shard 0: every message delivered once, all purged.
	_, err = shard.Drain(ctx, w.World, w.Ownership, d, 0, "n1", l.Epoch, rec.Handle, shard.DrainOptions{})
	require.NoError(t, err)
	require.Len(t, rec.Bodies(), 10)
	servertest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if n := storedShard(t, w, 0); n != 0 {
			return fmt.Errorf("stored shard 0: %d, want 0", n)
		}
		return nil
	})
}
