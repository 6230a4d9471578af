package main_test

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/server/servertest"
	"github.com/fencepost/fencepost/testkit/testutil"
)

var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fencepostd-test")
	if err != nil {
		panic(err)
	}
	bin = filepath.Join(dir, "fencepostd")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		panic(string(out))
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func freePort(t testing.TB) int { return testutil.FreePort(t) }

// TestDaemon_StartsWithDefaultWorldAndStopsOnSignal runs the real binary,
// uses the default world it made, and stops it with SIGTERM and SIGINT.
func TestDaemon_StartsWithDefaultWorldAndStopsOnSignal(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			port := freePort(t)
			data := t.TempDir()
			cmd := exec.Command(bin, "--port", fmt.Sprint(port), "--http-port", "0", "--data", data)
			var logs bytes.Buffer
			cmd.Stderr = &logs
			require.NoError(t, cmd.Start())
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			t.Cleanup(func() { _ = cmd.Process.Kill() })

			url := fmt.Sprintf("nats://127.0.0.1:%d", port)
			var c *client.Client
			servertest.CheckFor(t, 20*time.Second, 50*time.Millisecond, func() error {
				var err error
				c, err = client.Connect(url)
				if err != nil {
					return err
				}
				if _, err = c.World(testutil.Ctx(t, time.Second), "default"); err != nil {
					c.Close()
				}
				return err
			})
			defer c.Close()
			w, err := c.World(testutil.Ctx(t, 5*time.Second), "default")
			require.NoError(t, err)
			l, err := w.Ownership.Claim(testutil.Ctx(t, 5*time.Second), "id", "n", 0)
			require.NoError(t, err)
			require.Equal(t, uint64(1), l.Epoch)
			require.Equal(t, 10*time.Second, l.TTL, "the default world's default ttl")

			require.NoError(t, cmd.Process.Signal(sig))
			select {
			case err := <-exited:
				var ee *exec.ExitError
				if errors.As(err, &ee) {
					t.Fatalf("exit code %d after %v; logs:\n%s", ee.ExitCode(), sig, logs.String())
				}
				require.NoError(t, err)
			case <-time.After(20 * time.Second):
				t.Fatalf("still running 20s after %v; logs:\n%s", sig, logs.String())
			}
			require.True(t, strings.Contains(logs.String(), "shutting down"), logs.String())
			_, err = os.Stat(filepath.Join(data, "jetstream"))
			require.NoError(t, err, "file storage under the data dir")
		})
	}
}

// TestDaemon_ExitCodes: a bad flag or config file exits 2 naming the field
// before anything starts; a server that cannot start exits 1; --help 0.
func TestDaemon_ExitCodes(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()
	badFile := filepath.Join(t.TempDir(), "fencepostd.json")
	require.NoError(t, os.WriteFile(badFile, []byte(`{"sync": "often"}`), 0o600))
	badNATS := filepath.Join(t.TempDir(), "nats.conf")
	require.NoError(t, os.WriteFile(badNATS, []byte("jetstream {\n  max_file: plenty\n}\n"), 0o600))
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"--help"}, 0, "exit codes:"},
		{[]string{"--sync", "often"}, 2, `sync: "often" is neither`},
		{[]string{"--config", badFile}, 2, `sync: "often" is neither`},
		{[]string{"--replicas", "4"}, 2, "replicas: 4 is not 1, 3 or 5"},
		{[]string{"--partitions", "1025"}, 2, "partitions: 1025 is outside -1 (none), 0 (the default) and 1..1024"},
		{[]string{"--partitions", "-2"}, 2, "partitions: -2 is outside"},
		{[]string{"--shards", "1025"}, 2, "shards: 1025 is outside 0 (a per-id world, the default) and 1..1024"},
		{[]string{"--shards", "4", "--partitions", "4"}, 2, "shards or partitions, not both"},
		{[]string{"--nats-config", badNATS, "--port", "-1", "--data", t.TempDir(), "--http", "off"}, 2, "nats.conf:2"},
		{[]string{"--port", "-1", "--data", t.TempDir(), "--http", busy.Addr().String()}, 1, "address already in use"},
	} {
		cmd := exec.Command(bin, tc.args...)
		out, err := cmd.CombinedOutput()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		}
		require.Equal(t, tc.code, code, "%v: %s", tc.args, out)
		require.Contains(t, string(out), tc.msg, "%v", tc.args)
	}
}
