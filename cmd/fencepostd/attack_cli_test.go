package main_test

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/daemon"
	"github.com/fencepost/fencepost/server/servertest"
)

// TestAttack_TheCLIWithEachRole: the attacks of docs/security.md that the
// `fencepost` CLI can make, with the real binaries and each role's
// credentials (the raw NATS ones are in daemon's TestAttack_ tests):
// victim is held by node-b. A producer (the role file and a named one)
// may not claim, force-seize, delete state or reset; node-a may not
// force-seize node-b's id, delete its state (`state --delete` claims
// first, refused while node-b holds it), reset, remove the world or
// write the settings entry; node-b keeps its id and epoch throughout.
func TestAttack_TheCLIWithEachRole(t *testing.T) {
	cli := buildCLI(t)
	port, data := freePort(t), t.TempDir()
	d := startProc(t, "fencepostd", "--auth", "--port", fmt.Sprint(port), "--http-port", "0", "--data", data, "--log-level", "error")
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	run := func(creds string, args ...string) (int, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, cli, append(args, "--server", url, "--creds", creds, "--timeout", "2s")...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		_ = cmd.Run()
		t.Logf("fencepost %s: exit %d: %s", strings.Join(args, " "), cmd.ProcessState.ExitCode(), strings.TrimSpace(out.String()))
		return cmd.ProcessState.ExitCode(), out.String()
	}
	op := daemon.CredsFile(data, daemon.RoleOperator)
	servertest.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		if code, out := run(op, "claim", "victim", "--node", "node-b", "--ttl", "1m"); code != 0 {
			return fmt.Errorf("claim: exit %d: %s", code, out)
		}
		return nil
	})
	issue := func(args ...string) string {
		code, out, _ := creds(t, append(append([]string{"add"}, args...), "--data", data)...)
		require.Zero(t, code, out)
		i := strings.Index(out, "file=")
		return strings.TrimSpace(out[i+len("file="):])
	}
	nodeA := issue("--role", "owner", "--node", "node-a")
	shop := issue("--role", "producer", "--name", "shop")

	for _, producer := range []string{daemon.CredsFile(data, daemon.RoleProducer), shop} {
		for _, args := range [][]string{
			{"claim", "victim", "--node", "evil"},
			{"seize", "victim", "--node", "evil", "--force"},
			{"state", "victim", "--delete", "--node", "evil"},
			{"reset", "--yes"},
		} {
			code, out := run(producer, args...)
			require.NotZero(t, code, "%v", args)
			require.Contains(t, out, "not permitted", "%v", args)
		}
	}
	for _, args := range [][]string{
		{"seize", "victim", "--node", "node-a", "--force"},
		{"reset", "--yes"},
		{"world", "rm", "default", "--yes"},
	} {
		code, out := run(nodeA, args...)
		require.NotZero(t, code, "%v", args)
		require.Contains(t, out, "not permitted", "%v", args)
	}
	code, out := run(nodeA, "state", "victim", "--delete", "--node", "node-a")
	require.NotZero(t, code, out)
	require.Contains(t, out, "held-by", "refused while node-b holds the id")
	code, out = run(nodeA, "claim", "victim", "--node", "node-a")
	require.NotZero(t, code, out)
	require.Contains(t, out, "held-by")

	code, out = run(op, "owner", "victim")
	require.Zero(t, code, out)
	require.True(t, strings.HasPrefix(out, "owned-by node=node-b epoch=1 "), out)
	require.Zero(t, d.stop(t, syscall.SIGTERM))
}
