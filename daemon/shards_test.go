package daemon_test

import (
	"errors"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/daemon"
	"github.com/fencepost/fencepost/server/servertest"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// TestParse_Shards: --shards (and "shards" in the file) is the kind of
// fencepostd's own world: 1..1024 shards, without partitions, also with
// --auth; 0, the default, is a per-id world.
func TestParse_Shards(t *testing.T) {
	cfg, err := daemon.Parse(nil, io.Discard)
	require.NoError(t, err)
	require.Zero(t, cfg.Shards, "a per-id world by default")
	cfg, err = daemon.Parse([]string{"--shards", "16"}, io.Discard)
	require.NoError(t, err)
	require.Equal(t, 16, cfg.Shards)
	cfg, err = daemon.Parse([]string{"--config", writeFile(t, `{"shards": 1024}`)}, io.Discard)
	require.NoError(t, err)
	require.Equal(t, 1024, cfg.Shards)
	cfg, err = daemon.Parse([]string{"--shards", "4", "--auth"}, io.Discard)
	require.NoError(t, err)
	require.Equal(t, 4, cfg.Shards)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--shards", "1025"}, "shards: 1025 is outside 0 (a per-id world, the default) and 1..1024"},
		{[]string{"--shards", "-1"}, "shards: -1 is outside"},
		{[]string{"--shards", "4", "--partitions", "4"}, "shards or partitions, not both"},
	} {
		_, err := daemon.Parse(tc.args, io.Discard)
		require.True(t, errors.Is(err, daemon.ErrConfig), "%v: %v", tc.args, err)
		require.Contains(t, err.Error(), tc.want, "%v", tc.args)
	}
}

// TestDaemon_DefaultWorldShards: with --shards the world fencepostd makes
// ready is sharded, without partitions; started again over the same
// store without it, the world keeps its kind (fixed at creation).
func TestDaemon_DefaultWorldShards(t *testing.T) {
	dir := t.TempDir()
	open := func(s *started) *world.World {
		_, js := servertest.Connect(t, s.d.ClientURL())
		var w *world.World
		servertest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() (err error) {
			w, err = world.Open(testutil.Ctx(t, time.Second), js, "default")
			return err
		})
		return w
	}
	s := startDaemon(t, dir, "--shards", "8")
	s.waitReady(t)
	w := open(s)
	require.Equal(t, 8, w.Config.Shards)
	require.Equal(t, world.KindSharded, w.Config.Kind())
	require.Zero(t, w.Config.Partitions)
	s.shutdown(t)

	s = startDaemon(t, dir)
	s.waitReady(t)
	require.Equal(t, 8, open(s).Config.Shards, "an existing world is opened as it is")
	s.shutdown(t)
}
