package main_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/daemon"
	"github.com/fencepost/fencepost/server/servertest"
)

// buildCLI builds the fencepost CLI next to the fencepostd binary, once.
func buildCLI(t *testing.T) string {
	t.Helper()
	cliOnce.Do(func() {
		cliPath = filepath.Join(filepath.Dir(bin), "fencepost")
		if out, err := exec.Command("go", "build", "-o", cliPath, "../fencepost").CombinedOutput(); err != nil {
			cliErr = fmt.Errorf("build fencepost: %v\n%s", err, out)
		}
	})
	if cliErr != nil {
		t.Fatal(cliErr)
	}
	return cliPath
}

var (
	cliOnce sync.Once
	cliPath string
	cliErr  error
)

// TestDaemon_AuthWithTheCLI runs `fencepostd --auth` and the real
// `fencepost` CLI with the credentials it wrote, each role on its own inbox
// prefix (taken from the creds file): the producer sends but cannot claim,
// read the world's state or reset (it may not even read the world's
// streams); the owner claims and watches; the operator resets.
func TestDaemon_AuthWithTheCLI(t *testing.T) {
	cli := buildCLI(t)
	port, data := freePort(t), t.TempDir()
	d := startProc(t, "fencepostd", "--auth", "--port", fmt.Sprint(port), "--http-port", "0", "--data", data, "--log-level", "warn")
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	as := func(role string, args ...string) (int, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, cli, append(args, "--server", url, "--creds", daemon.CredsFile(data, role), "--timeout", "1s")...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		_ = cmd.Run()
		t.Logf("%s: fencepost %s: exit %d: %s", role, strings.Join(args, " "), cmd.ProcessState.ExitCode(), strings.TrimSpace(out.String()))
		return cmd.ProcessState.ExitCode(), out.String()
	}
	servertest.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		if code, out := as(daemon.RoleProducer, "send", "order-1", "hello"); code != 0 {
			return fmt.Errorf("send: exit %d: %s", code, out)
		}
		return nil
	})
	for _, role := range daemon.Roles {
		fi, err := os.Stat(daemon.CredsFile(data, role))
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	}
	for _, args := range [][]string{{"claim", "order-1", "--node", "evil"}, {"stat"}, {"stat", "order-1"}, {"ls"}, {"owner", "order-1"}} {
		code, out := as(daemon.RoleProducer, args...)
		require.Equal(t, 1, code, out)
		require.Contains(t, out, `error: not permitted: the server refused publish to "$JS.API.STREAM.INFO.KV_fp_default"`)
		require.Contains(t, out, `may only post`)
	}
	code, out := as(daemon.RoleProducer, "reset", "--yes")
	require.NotZero(t, code, out)
	require.Contains(t, out, "error: not permitted")
	code, out = as(daemon.RoleProducer, "send", "order-1", "again", "--json")
	require.Zero(t, code, out)
	require.Contains(t, out, `"outcome":"posted"`)
	// Without its inbox prefix the producer gets no answers at all: the
	// server lets it subscribe to no other inbox.
	code, out = as(daemon.RoleProducer, "send", "order-1", "x", "--inbox-prefix", "_INBOX")
	require.NotZero(t, code, out)
	require.Contains(t, out, `not permitted: the server refused subscription to "_INBOX.`)
	code, out = as(daemon.RoleOwner, "claim", "order-1", "--node", "n1")
	require.Zero(t, code, out)
	require.True(t, strings.HasPrefix(out, "claimed"), out)
	code, out = as(daemon.RoleOwner, "seize", "order-1", "--node", "n2", "--force")
	require.Equal(t, 1, code, out)
	require.Contains(t, out, `error: not permitted: the server refused publish to "$KV.fp_default.f.`)
	code, out = as(daemon.RoleOwner, "owner", "order-1")
	require.Zero(t, code, out)
	require.Contains(t, out, "node=n1", "the owner's forced seize changed nothing")
	code, out = as(daemon.RoleOwner, "world", "rm", "default", "--yes")
	require.NotZero(t, code, out)
	require.Contains(t, out, `error: not permitted: the server refused publish to "$JS.API.STREAM.DELETE.`)
	code, out = as(daemon.RoleOperator, "seize", "order-1", "--node", "ops", "--force")
	require.Zero(t, code, out)
	require.True(t, strings.HasPrefix(out, "seized"), out)
	code, out = as(daemon.RoleOperator, "reset", "--yes")
	require.Zero(t, code, out)
	require.Zero(t, d.stop(t, syscall.SIGTERM))
}
