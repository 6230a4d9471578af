package world_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// TestInspect_Sharded: a sharded world's info and mailbox ids read its
// mail where the stream stores it, under each id's shard: the depth, the
// mailboxes, the oldest message (read on the stored subjects, not on
// those posted to, where nothing is stored) and each id's count.
func TestInspect_Sharded(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{Shards: 4})
	js := env.Client.JetStream()
	ctx := testutil.Ctx(t, 30*time.Second)

	posts := map[string]uint64{"a": 2, "b.c": 1, "ü >": 3}
	for id, n := range posts {
		for range n {
			_, err := js.Publish(ctx, wire.MailboxSubject(w.Name, id), []byte(id))
			require.NoError(t, err)
		}
	}
	_, err := js.Publish(ctx, wire.DeadLetterSubject(w.Name, "a"), []byte("dead"))
	require.NoError(t, err)

	info, err := w.Inspect(ctx, world.InspectOptions{})
	require.NoError(t, err)
	require.EqualValues(t, 6, info.Depth)
	require.EqualValues(t, 3, info.Mailboxes)
	require.EqualValues(t, 1, info.DeadLetters)
	require.False(t, info.Oldest.IsZero(), "the oldest message is read on the shards' stored subjects")
	require.Equal(t, 4, info.Config.Shards)
	require.Equal(t, world.KindSharded, info.Config.Kind())

	ids, err := w.MailboxIDs(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]uint64(posts), ids)
}
