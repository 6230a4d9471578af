package world_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// TestCreate_BucketRefusesRollups: a rollup on any key would wipe every
// record and epoch of the world; the bucket refuses it, and the records
// stay.
func TestCreate_BucketRefusesRollups(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{})
	ctx := testutil.Ctx(t, 10*time.Second)
	_, err := w.Ownership.Claim(ctx, "a", "n1", time.Minute)
	require.NoError(t, err)
	info, err := handles.Of(w).Bucket.Info(ctx)
	require.NoError(t, err)
	require.False(t, info.Config.AllowRollup)

	m := nats.NewMsg(wire.KeySubject(w.Name, wire.RecordKey("b")))
	m.Header.Set("Nats-Rollup", "all")
	m.Header.Set("KV-Operation", "PURGE")
	_, err = env.Client.JetStream().PublishMsg(ctx, m)
	require.ErrorContains(t, err, "rollup")

	st, err := w.Ownership.Owner(ctx, "a")
	require.NoError(t, err)
	require.True(t, st.Held, "the record survives")
	after, err := handles.Of(w).Bucket.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, info.State.LastSeq, after.State.LastSeq, "nothing written")
}

// TestConfig_Purge: the purge mode defaults to the owner and accepts only
// owner or server.
func TestConfig_Purge(t *testing.T) {
	require.Equal(t, world.PurgeByOwner, world.Config{}.WithDefaults().Purge)
	c := world.Config{Purge: world.PurgeByServer}.WithDefaults()
	require.NoError(t, c.Validate())
	c.Purge = "nobody"
	require.ErrorIs(t, c.Validate(), world.ErrInvalidConfig)
	require.ErrorContains(t, c.Validate(), "purge")
}
