package world_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/queue"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// TestOpenToPost_SettingsEntry: Create writes the settings entry and
// OpenToPost opens the world from it alone (no stream handles), with the
// world's settings and the limits a queue enforces; a reset writes it
// again; a world without it (made before it existed) gets ErrNoSettings
// until PublishSettings writes it; an absent world is ErrUnknownWorld.
func TestOpenToPost_SettingsEntry(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	ctx := testutil.Ctx(t, 20*time.Second)
	w := env.World(t, world.Config{MaxMsgsPerMailbox: 7, MaxBody: 1000})
	js := env.Client.JetStream()

	pw, err := world.OpenToPost(ctx, js, w.Name)
	require.NoError(t, err)
	require.True(t, pw.PostOnly)
	require.Nil(t, handles.Of(pw).KV)
	require.Nil(t, handles.Of(pw).Bucket)
	require.Nil(t, handles.Of(pw).Mailbox)
	require.Equal(t, w.Config, pw.Config)
	q := queue.New(pw)
	require.EqualValues(t, 7, q.Limit())
	require.Equal(t, 1000, q.MaxBody())
	p, err := q.Send(ctx, "a", []byte("x"))
	require.NoError(t, err)
	require.NotZero(t, p.Seq)

	require.NoError(t, world.Reset(ctx, js, w.Name))
	pw, err = world.OpenToPost(ctx, js, w.Name)
	require.NoError(t, err, "the reset wrote the entry again")
	require.Equal(t, w.Config, pw.Config)

	require.NoError(t, handles.Of(w).KV.Delete(ctx, wire.WorldKey))
	_, err = world.OpenToPost(ctx, js, w.Name)
	require.ErrorIs(t, err, world.ErrNoSettings, "a delete marker")
	require.NoError(t, handles.Of(w).Bucket.Purge(ctx, jetstream.WithPurgeSubject(wire.KeySubject(w.Name, wire.WorldKey))))
	_, err = world.OpenToPost(ctx, js, w.Name)
	require.ErrorIs(t, err, world.ErrNoSettings, "no entry at all")
	require.NoError(t, world.PublishSettings(ctx, w.World))
	_, err = world.OpenToPost(ctx, js, w.Name)
	require.NoError(t, err)
	seq, err := handles.Of(w).Bucket.Info(ctx)
	require.NoError(t, err)
	require.NoError(t, world.PublishSettings(ctx, w.World))
	again, err := handles.Of(w).Bucket.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, seq.State.LastSeq, again.State.LastSeq, "an entry that is up to date is not written again")

	_, err = world.OpenToPost(ctx, js, "nosuchworld")
	require.ErrorIs(t, err, world.ErrUnknownWorld)
}
