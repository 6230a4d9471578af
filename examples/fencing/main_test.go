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

func build(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "fencing")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, string(out))
	return bin
}

func runExample(t *testing.T, bin string, env []string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Run(), out.String())
	return out.String()
}

// TestFencing_LeavesNothing: the example runs its walk-through (seized
// epoch 2 over a lapsed lease, node-a fenced) and removes its world,
// also when a killed run left one behind with other settings and records.
func TestFencing_LeavesNothing(t *testing.T) {
	env := testutil.Start(t, testutil.Target{Name: "single"})
	ctx := testutil.Ctx(t, time.Minute)
	bin := build(t)
	worlds := func() []string {
		names, err := env.Client.Worlds(ctx)
		require.NoError(t, err)
		return names
	}
	before := worlds()

	out := runExample(t, bin, []string{"NATS_URL=" + env.URL})
	require.Contains(t, out, "node-b seized: epoch=2\n")
	require.Contains(t, out, "node-a guard with epoch 1: ")
	require.Contains(t, out, "world example-fencing removed\n")
	require.Equal(t, before, worlds(), "the example's world is gone")

	// What a run killed half-way leaves: the world, other settings, a holder.
	w, err := env.Client.CreateWorld(ctx, worldName, world.Config{MaxDeliveries: 3})
	require.NoError(t, err)
	_, err = w.Ownership.Claim(ctx, "order-42", "node-a", time.Hour)
	require.NoError(t, err)
	out = runExample(t, bin, []string{"NATS_URL=" + env.URL})
	require.Contains(t, out, "node-b seized: epoch=2\n", "a fresh world: epochs from 1 again")
	require.Equal(t, before, worlds())
}

// TestFencing_Embedded_LeavesNoStore: with --embedded, the server's store
// directory is removed when the example ends.
func TestFencing_Embedded_LeavesNoStore(t *testing.T) {
	bin := build(t)
	tmp := t.TempDir()
	out := runExample(t, bin, []string{"TMPDIR=" + tmp}, "--embedded")
	require.Contains(t, out, "world example-fencing removed\n")
	left, err := os.ReadDir(tmp)
	require.NoError(t, err)
	require.Empty(t, left, "the embedded server's store is removed")
}
