package main_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/daemon"
	"github.com/fencepost/fencepost/server/servertest"
)

// creds runs `fencepostd creds args...` and returns its exit code, stdout
// and stderr.
func creds(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"creds"}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	_ = cmd.Run()
	t.Logf("fencepostd creds %s: exit %d: %s%s", strings.Join(args, " "), cmd.ProcessState.ExitCode(), out.String(), errb.String())
	return cmd.ProcessState.ExitCode(), out.String(), errb.String()
}

// TestDaemon_CredsCommands runs the real binaries: `fencepostd creds add
// --role owner --node N` issues node owners beside a running fencepostd
// --auth, `creds ls` lists them, and `creds revoke --node node-a` closes
// node-a's connection at once while node-b's stays and works; the
// revoked node is listed as revoked and cannot connect again.
func TestDaemon_CredsCommands(t *testing.T) {
	port, data := freePort(t), t.TempDir()
	d := startProc(t, "fencepostd", "--auth", "--port", fmt.Sprint(port), "--http-port", "0", "--data", data, "--log-level", "warn")
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	servertest.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		nc, err := nats.Connect(url, nats.UserCredentials(daemon.CredsFile(data, daemon.RoleOperator)))
		if err != nil {
			return err
		}
		nc.Close()
		return nil
	})

	code, _, errOut := creds(t, "add", "--node", "node-a", "--data", data)
	require.Equal(t, 2, code, "no role: usage")
	require.Contains(t, errOut, "--role is required")
	code, _, errOut = creds(t, "add", "--role", "producer", "--node", "node-a", "--data", data)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "binds an owner")
	// An empty --node or --name is refused, and writes nothing: it used
	// to issue the role-wide owner.creds.
	before, err := os.ReadFile(daemon.CredsFile(data, daemon.RoleOwner))
	require.NoError(t, err)
	for _, args := range [][]string{{"--role", "owner", "--node", ""}, {"--role", "owner", "--node="}, {"--role", "producer", "--name", ""}} {
		code, _, errOut = creds(t, append(append([]string{"add"}, args...), "--data", data)...)
		require.Equal(t, 2, code, "%v", args)
		require.Contains(t, errOut, "is empty", "%v", args)
	}
	after, err := os.ReadFile(daemon.CredsFile(data, daemon.RoleOwner))
	require.NoError(t, err)
	require.Equal(t, before, after, "owner.creds not written again")
	for _, n := range []string{"node-a", "node-b"} {
		code, out, _ := creds(t, "add", "--role", "owner", "--node", n, "--data", data)
		require.Zero(t, code)
		require.Contains(t, out, fmt.Sprintf("issued role=owner node=%q", n))
		require.Contains(t, out, daemon.NodeCredsFile(data, n))
	}
	code, out, _ := creds(t, "add", "--role", "producer", "--name", "shop", "--data", data)
	require.Zero(t, code)
	require.Contains(t, out, `issued role=producer name="shop"`)
	require.Contains(t, out, daemon.ProducerCredsFile(data, "shop"))
	conns := map[string]*nats.Conn{}
	closed := make(chan string, 2)
	for _, n := range []string{"node-a", "node-b"} {
		nc, err := nats.Connect(url, nats.UserCredentials(daemon.NodeCredsFile(data, n)), nats.MaxReconnects(0),
			nats.ClosedHandler(func(*nats.Conn) { closed <- n }))
		require.NoError(t, err, n)
		t.Cleanup(nc.Close)
		conns[n] = nc
	}

	code, out, _ = creds(t, "revoke", "--node", "node-a", "--data", data, "--server", url)
	require.Zero(t, code)
	require.Contains(t, out, `revoked node="node-a"`)
	require.Contains(t, out, "applied by the server")
	select {
	case n := <-closed:
		require.Equal(t, "node-a", n)
	case <-time.After(10 * time.Second):
		t.Fatal("node-a's connection was not closed")
	}
	require.NoError(t, conns["node-b"].FlushTimeout(5*time.Second), "node-b is still served")
	require.True(t, conns["node-b"].IsConnected())
	_, err = nats.Connect(url, nats.UserCredentials(daemon.NodeCredsFile(data, "node-a")))
	require.ErrorIs(t, err, nats.ErrAuthorization)

	code, out, _ = creds(t, "ls", "--data", data, "--json")
	require.Zero(t, code)
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var is daemon.Issued
		require.NoError(t, json.Unmarshal([]byte(line), &is), line)
		require.False(t, is.Expires.IsZero(), "every JWT expires: %s", line)
		seen[is.Role+"/"+is.Node+is.Name] = !is.Revoked.IsZero()
	}
	require.Equal(t, map[string]bool{"producer/": false, "owner/": false, "operator/": false, "owner/node-a": true, "owner/node-b": false, "producer/shop": false}, seen)
	code, out, _ = creds(t, "ls", "--data", data)
	require.Zero(t, code)
	require.Contains(t, out, "ROLE")
	require.Contains(t, out, "node-b")

	code, _, errOut = creds(t, "revoke", "--node", "nobody", "--data", data, "--server", url)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "no credentials of that node")
	code, _, errOut = creds(t, "revoke", "--node", "node-b", "--producer", "shop", "--data", data)
	require.Equal(t, 2, code, "one of them")
	require.Contains(t, errOut, "give --node or --producer")
	code, out, _ = creds(t, "revoke", "--producer", "shop", "--data", data, "--server", url)
	require.Zero(t, code)
	require.Contains(t, out, `revoked producer="shop"`)
	require.Zero(t, d.stop(t, syscall.SIGTERM))
}
