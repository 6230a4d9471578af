package verify_test

import (
	"context"
	"fmt"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/verify"
	"github.com/fencepost/fencepost/world"
)

// TestRun_OwnersFail_RemovesWorld: a run whose owners never deliver (here
// they cannot even start their worker: the command is sh, which reads
// the spec and fails) fails with an error that says so and what the
// owners printed, and still removes its world; an existing world name is
// refused before anything is written.
func TestRun_OwnersFail_RemovesWorld(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	names := func() []string {
		ws, err := env.Client.Worlds(testutil.Ctx(t, 10*time.Second))
		require.NoError(t, err)
		return ws
	}
	before := names()
	var progress []string
	cfg := verify.Config{
		Progress:     func(format string, args ...any) { progress = append(progress, fmt.Sprintf(format, args...)) },
		Conn:         verify.Conn{URL: env.URL},
		Duration:     verify.MinDuration,
		Start:        5 * time.Second, // 2 s was too short for the shells to start and exit under -race in CI
		OwnerCommand: func() *exec.Cmd { return exec.Command("sh", "-c", "read spec; echo owner cannot start >&2; exit 1") },
	}
	res, err := verify.Run(context.Background(), cfg)
	require.ErrorContains(t, err, "no owner delivered a message within 5s")
	require.ErrorContains(t, err, "owner cannot start")
	require.NotNil(t, res)
	require.Contains(t, progress, fmt.Sprintf("world %s created (replicas 1, partitions %d)", res.Meta.World, world.DefaultPartitions))
	require.Equal(t, world.DefaultPartitions, res.Meta.Partitions)
	require.Contains(t, progress, "world "+res.Meta.World+" removed")
	require.Equal(t, before, names(), "the world was left behind")

	w := env.World(t, world.Config{})
	cfg.World = w.Name
	res, err = verify.Run(context.Background(), cfg)
	require.ErrorContains(t, err, "exists; verify runs on a world of its own")
	require.Nil(t, res)
}
