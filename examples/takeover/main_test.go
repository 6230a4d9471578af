package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// TestTakeover_LeavesNothing: the example's crash takeover loses nothing,
// and the world it worked in is gone when it ends, also when a killed run
// left one behind with other settings and messages.
func TestTakeover_LeavesNothing(t *testing.T) {
	env := testutil.Start(t, testutil.Target{Name: "single"})
	ctx := testutil.Ctx(t, time.Minute)
	bin := filepath.Join(t.TempDir(), "takeover")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, string(out))
	worlds := func() []string {
		names, err := env.Client.Worlds(ctx)
		require.NoError(t, err)
		return names
	}
	run := func() string {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin)
		cmd.Env = append(os.Environ(), "NATS_URL="+env.URL)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		require.NoError(t, cmd.Run(), out.String())
		return out.String()
	}
	before := worlds()

	out1 := run()
	require.Contains(t, out1, "lost 0\n")
	require.Contains(t, out1, "world example-takeover removed\n")
	require.Equal(t, before, worlds(), "the example's world is gone")

	w, err := env.Client.CreateWorld(ctx, worldName, world.Config{MaxDeliveries: 3})
	require.NoError(t, err)
	_, err = w.Send(ctx, id, []byte("left by a killed run"))
	require.NoError(t, err)
	out2 := run()
	require.Contains(t, out2, "lost 0\n")
	require.NotContains(t, out2, "left by a killed run")
	require.Equal(t, before, worlds())
}
