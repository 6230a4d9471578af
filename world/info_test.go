package world_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// TestInspect_Counts: depth, mailboxes and dead letters, as read from the
// streams (the record counts are ownership's: TestCountRecords).
func TestInspect_Counts(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{})
	js := env.Client.JetStream()
	ctx := testutil.Ctx(t, 30*time.Second)

	info, err := world.Inspect(ctx, js, w.Name, world.InspectOptions{})
	require.NoError(t, err)
	require.Zero(t, info.Depth)
	require.True(t, info.Oldest.IsZero())

	for i, id := range []string{"a", "a", "x"} {
		_, err := js.Publish(ctx, wire.MailboxSubject(w.Name, id), []byte{byte(i)})
		require.NoError(t, err)
	}
	_, err = js.Publish(ctx, wire.DeadLetterSubject(w.Name, "a"), []byte("dead"))
	require.NoError(t, err)

	info, err = world.Inspect(ctx, js, w.Name, world.InspectOptions{})
	require.NoError(t, err)
	require.EqualValues(t, 3, info.Depth)
	require.EqualValues(t, 2, info.Mailboxes)
	require.EqualValues(t, 1, info.DeadLetters)
	require.EqualValues(t, 1, info.DeadIDs)
	require.False(t, info.Oldest.IsZero())

	_, err = world.Inspect(ctx, js, "nope", world.InspectOptions{})
	require.ErrorIs(t, err, world.ErrUnknownWorld)
}
