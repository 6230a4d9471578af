package main_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCLI_BenchIsItsOwnBinary: the client CLI links no nats-server (issue
// 13); `fencepost bench` runs the fencepost-bench binary beside it (the
// CLI built with -tags bench), and says how to build it when it is not
// there.
func TestCLI_BenchIsItsOwnBinary(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	require.NoError(t, err, string(out))
	require.NotContains(t, string(out), "nats-server", "the client CLI links nats-server")

	// The binary this test builds is removed when it ends: the next run
	// (-count 2) starts without one again.
	benchBin := filepath.Join(filepath.Dir(bin), "fencepost-bench")
	t.Cleanup(func() { _ = os.Remove(benchBin) })
	r := cli(t, "nats://127.0.0.1:1", "default", "bench", "--scenario", "nope")
	require.Equal(t, 1, r.code, "%+v", r)
	require.Contains(t, r.err, "go build -tags bench -o "+benchBin)

	if out, err := exec.Command("go", "build", "-tags", "bench", "-o", benchBin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	r = cli(t, "nats://127.0.0.1:1", "default", "bench", "--scenario", "nope")
	require.Equal(t, 2, r.code, "%+v", r)
	require.True(t, strings.Contains(r.err, "--scenario"), r.err)

	// Global flags before the command reach the harness: --server given
	// means the user's server, not an embedded one.
	r = cli(t, "nats://127.0.0.1:1", "default", "--server", "nats://127.0.0.1:1", "--timeout", "1s", "bench", "--quiet")
	require.Equal(t, 1, r.code, "%+v", r)
	require.Contains(t, r.err, "no servers available")
	r = cli(t, "nats://127.0.0.1:1", "default", "bench", "--help")
	require.Equal(t, 0, r.code, "%+v", r)
	require.Contains(t, r.out, "--embedded", "the harness's own flags")
}
