package main_test

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// TestCLI_Watch_Reset: `fencepost reset` shows in `fencepost watch` (issue
// 19 item 10): every id the watch knew is reported deleted
// (docs/contract.md section 6's word), in id order, and a claim after the reset starts again at
// epoch 1.
func TestCLI_Watch_Reset(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{})
	cmd := exec.Command(bin, "watch", "--count", "5")
	cmd.Env = append(os.Environ(), "NATS_URL="+env.URL, "FENCEPOST_WORLD="+w.Name)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	ready := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stderr).ReadString('\n')
		ready <- line
	}()
	select {
	case line := <-ready:
		require.Contains(t, line, "watching world "+w.Name)
	case <-time.After(10 * time.Second):
		t.Fatal("watch did not start")
	}
	out := make(chan string)
	go func() {
		defer close(out)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			out <- sc.Text()
		}
	}()
	var lines []string
	next := func() string {
		t.Helper()
		select {
		case line, ok := <-out:
			require.True(t, ok, "watch output ended after %q", lines)
			lines = append(lines, line)
			return line
		case <-time.After(10 * time.Second):
			t.Fatalf("no watch event within 10s; got %q", lines)
			return ""
		}
	}
	run := func(args ...string) {
		t.Helper()
		r := cli(t, env.URL, w.Name, args...)
		require.Equal(t, 0, r.code, "%v: %+v", args, r)
	}
	run("claim", "b", "--node", "n1", "--ttl", "1m")
	require.True(t, strings.HasPrefix(next(), "claimed id=b node=n1 epoch=1 "), lines)
	run("claim", "a", "--node", "n2", "--ttl", "1m")
	require.True(t, strings.HasPrefix(next(), "claimed id=a node=n2 epoch=1 "), lines)
	run("reset", "--yes")
	require.True(t, strings.HasPrefix(next(), "deleted id=a node=n2 epoch=1 "), lines)
	require.True(t, strings.HasPrefix(next(), "deleted id=b node=n1 epoch=1 "), lines)
	run("claim", "a", "--node", "n3", "--ttl", "1m")
	require.True(t, strings.HasPrefix(next(), "claimed id=a node=n3 epoch=1 "), lines)
}
