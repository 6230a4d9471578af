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

	"github.com/fencepost/fencepost/internal/testutil"
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
	_, err = s.Claim(ctx, "a.b c", "n1", 100*time.Millisecond)
	require.NoError(t, err)
	_, err = s.Renew(ctx, "a.b c", "n1", 100*time.Millisecond)
	require.NoError(t, err)
	_, err = s.Claim(ctx, "other", "n1", time.Minute) // not watched
	require.NoError(t, err)
	var lines []map[string]any
	sc := bufio.NewScanner(stdout)
	readLine := func() map[string]any {
		require.True(t, sc.Scan(), "watch output ended")
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m), sc.Text())
		lines = append(lines, m)
		return m
	}
	readLine()
	readLine()
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
