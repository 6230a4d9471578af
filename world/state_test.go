package world_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// TestCreate_BucketAllowsAtomic: a new world's bucket takes atomic batches
// (per-id state); a world created before (the setting off) still opens,
// says it does not, and creating it again with its settings turns it on.
func TestCreate_BucketAllowsAtomic(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	cw := env.World(t, world.Config{})
	ctx := testutil.Ctx(t, 10*time.Second)
	js := env.Client.JetStream()
	w, err := world.Open(ctx, js, cw.Name)
	require.NoError(t, err)
	require.True(t, w.AllowsState())

	// An old world: the bucket without allow_atomic.
	cfg := handles.Of(w).Bucket.CachedInfo().Config
	cfg.AllowAtomicPublish = false
	_, err = js.UpdateStream(ctx, cfg)
	require.NoError(t, err)
	old, err := world.Open(ctx, js, cw.Name)
	require.NoError(t, err, "an old world opens")
	require.False(t, old.AllowsState())

	again, err := world.Create(ctx, js, cw.Name, old.Config)
	require.NoError(t, err)
	require.True(t, again.AllowsState())
	info, err := js.Stream(ctx, wire.BucketStream(cw.Name))
	require.NoError(t, err)
	require.True(t, info.CachedInfo().Config.AllowAtomicPublish)
	require.False(t, info.CachedInfo().Config.AllowRollup)
}
