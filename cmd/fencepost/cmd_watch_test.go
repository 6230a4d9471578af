package main_test

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

func TestCLI_Watch(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{})
	ctx := testutil.Ctx(t, time.Minute)
	cmd := exec.Command(bin, "watch", "a.b c", "--count", "5", "--json")
	cmd.Env = append(os.Environ(), "NATS_URL="+env.URL, "FENCEPOST_WORLD="+w.Name)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	defer cmd.Process.Kill()
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

	s := w.Ownership
	var lines []map[string]any
	out := make(chan string)
	go func() {
		defer close(out)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			out <- sc.Text()
		}
	}()
	// readLine waits for the next event. Each write below waits for the
	// event of the one before: the bucket keeps one revision per key, so
	// writes in a burst may be folded into one event (ownership's
	// TestWatch_FoldsButEndsOnTheLatestState).
	readLine := func() map[string]any {
		t.Helper()
		select {
		case line, ok := <-out:
			require.True(t, ok, "watch output ended after %v", lines)
			var m map[string]any
			require.NoError(t, json.Unmarshal([]byte(line), &m), line)
			lines = append(lines, m)
			return m
		case <-time.After(10 * time.Second):
			t.Fatalf("no watch event within 10s; got %v", lines)
			return nil
		}
	}
	_, err = s.Claim(ctx, "a.b c", "n1", time.Second)
	require.NoError(t, err)
	readLine()
	_, err = s.Renew(ctx, "a.b c", "n1", time.Second)
	require.NoError(t, err)
	readLine()
	_, err = s.Claim(ctx, "other", "n1", time.Minute) // not watched
	require.NoError(t, err)
	require.Equal(t, "lapsed", readLine()["outcome"]) // no write: from the watcher's timer
	_, err = s.Seize(ctx, "a.b c", "n2", time.Minute, false)
	require.NoError(t, err)
	readLine()
	require.NoError(t, s.Release(ctx, "a.b c", "n2"))
	readLine()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		require.NoError(t, err, "--count 5 exits 0")
	case <-time.After(10 * time.Second):
		t.Fatal("watch --count 5 did not exit")
	}
	var words []string
	for _, m := range lines {
		words = append(words, m["outcome"].(string))
		require.Equal(t, "a.b c", m["id"])
	}
	require.Equal(t, "claimed renewed lapsed claimed released", strings.Join(words, " "))
	require.Equal(t, "n2", lines[3]["node"])
	require.EqualValues(t, 2, lines[3]["epoch"])
}
