package world_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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

// TestInspect_OldestIsTheServers: the oldest message's age comes from the
// time the server stored it, not from a Nats-Time-Stamp header its
// publisher sent (the broker stores any header; nats.go's GetMsg read the
// first of that name, the publisher's).
func TestInspect_OldestIsTheServers(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{})
	js := env.Client.JetStream()
	ctx := testutil.Ctx(t, 30*time.Second)

	m := nats.NewMsg(wire.MailboxSubject(w.Name, "a"))
	m.Data = []byte("x")
	m.Header.Set(jetstream.TimeStampHeaer, "2001-01-01T00:00:00Z")
	before := time.Now()
	_, err := js.PublishMsg(ctx, m)
	require.NoError(t, err)

	info, err := world.Inspect(ctx, js, w.Name, world.InspectOptions{})
	require.NoError(t, err)
	require.EqualValues(t, 1, info.Depth)
	require.WithinDuration(t, before, info.Oldest, 5*time.Second, "oldest %v", info.Oldest)
	require.Less(t, info.OldestAge, time.Minute)
}
