package world_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// TestInspect_Counts: records, live holders (plain and backed by a node
// lease), acquisitions, depth, mailboxes and dead letters, as read from
// the streams.
func TestInspect_Counts(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{})
	js := env.Client.JetStream()
	ctx := testutil.Ctx(t, 30*time.Second)

	info, err := world.Inspect(ctx, js, w.Name, world.InspectOptions{})
	require.NoError(t, err)
	require.Zero(t, info.Records)
	require.Zero(t, info.Depth)
	require.True(t, info.Oldest.IsZero())

	_, err = w.Ownership.Claim(ctx, "a", "n1", time.Minute)
	require.NoError(t, err)
	_, err = w.Ownership.Seize(ctx, "a", "n2", time.Minute, true) // epoch 2
	require.NoError(t, err)
	_, err = w.Ownership.Claim(ctx, "b", "n1", time.Minute)
	require.NoError(t, err)
	require.NoError(t, w.Ownership.Release(ctx, "b", "n1")) // free, epoch 1
	ss, err := w.Ownership.OpenSession(ctx, "n3", time.Minute)
	require.NoError(t, err)
	defer ss.Orphan()
	for _, id := range []string{"c", "d"} {
		_, err := ss.Claim(ctx, id)
		require.NoError(t, err)
	}
	for i, id := range []string{"a", "a", "x"} {
		_, err := js.Publish(ctx, wire.MailboxSubject(w.Name, id), []byte{byte(i)})
		require.NoError(t, err)
	}
	_, err = js.Publish(ctx, wire.DeadLetterSubject(w.Name, "a"), []byte("dead"))
	require.NoError(t, err)

	info, err = world.Inspect(ctx, js, w.Name, world.InspectOptions{})
	require.NoError(t, err)
	require.EqualValues(t, 4, info.Records)
	require.EqualValues(t, 3, info.Owned, "a, and c and d through the live node lease")
	require.EqualValues(t, 2+1+1+1, info.Acquisitions)
	require.EqualValues(t, 3, info.Depth)
	require.EqualValues(t, 2, info.Mailboxes)
	require.EqualValues(t, 1, info.DeadLetters)
	require.EqualValues(t, 1, info.DeadIDs)
	require.False(t, info.Oldest.IsZero())
	require.Zero(t, info.Unreadable)

	// The node lease ends: the ids it backed are no longer owned.
	require.NoError(t, ss.CloseContext(ctx))
	info, err = world.Inspect(ctx, js, w.Name, world.InspectOptions{})
	require.NoError(t, err)
	require.EqualValues(t, 1, info.Owned)

	info, err = world.Inspect(ctx, js, w.Name, world.InspectOptions{SkipRecords: true})
	require.NoError(t, err)
	require.Zero(t, info.Records)
	require.EqualValues(t, 3, info.Depth)

	_, err = world.Inspect(ctx, js, "nope", world.InspectOptions{})
	require.ErrorIs(t, err, world.ErrUnknownWorld)
}
