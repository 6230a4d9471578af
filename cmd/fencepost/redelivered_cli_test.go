package main_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// TestCLI_Work_RedeliveredLabel: FENCEPOST_REDELIVERED (docs/design.md 3.6)
// across graceful stops. A first delivery says 0. A worker stopped with
// SIGINT after its handlers finished releases its ids: the next worker's
// deliveries say 0 (a clean handoff). A worker stopped with SIGINT while a
// handler runs kills that handler, and leaves its id to the node lease:
// the next worker delivers the message again with 1. (A SIGKILL:
// TestCLI_Work_SIGKILL.)
func TestCLI_Work_RedeliveredLabel(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{})
	dir := t.TempDir()
	out, started := filepath.Join(dir, "out"), filepath.Join(dir, "started")
	script := `body=$(cat); if [ "$body" = slow ] && [ "$FENCEPOST_NODE" = w2 ]; then touch ` + started + `; sleep 30; fi; printf '%s %s %s %s\n' "$FENCEPOST_NODE" "$body" "$FENCEPOST_DELIVERY" "$FENCEPOST_REDELIVERED" >> ` + out
	run := func(node string) *workProc {
		p := &workProc{cmd: exec.Command(bin, "work", "--node", node, "--ttl", "1s", "--ids", "x", "--exec", script), stderr: newSyncBuffer(), done: make(chan struct{})}
		p.cmd.Env = append(os.Environ(), "NATS_URL="+env.URL, "FENCEPOST_WORLD="+w.Name, "FENCEPOST_LOG=debug")
		p.cmd.Stderr = p.stderr
		p.start(t)
		return p
	}
	send := func(bodies ...string) {
		for _, b := range bodies {
			require.Equal(t, 0, cli(t, env.URL, w.Name, "send", "x", b).code)
		}
	}
	stop := func(p *workProc) {
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT))
		require.Equal(t, 0, p.wait(t, 20*time.Second), "stderr:\n%s", p.stderr.String())
	}

	send("a", "b")
	w1 := run("w1")
	require.Equal(t, []string{"w1 a 1 0", "w1 b 1 0"}, waitLines(t, out, 2, 15*time.Second), "first deliveries")
	// b's line is written before its handler exits: stop w1 once b is
	// committed, not while its handler may still run.
	testutil.WaitFor(t, 15*time.Second, "w1 committed b", func() bool {
		return strings.Contains(cli(t, env.URL, w.Name, "stat", "x").out, " cursor=2 ")
	})
	stop(w1)

	send("c", "slow")
	w2 := run("w2")
	testutil.WaitFor(t, 15*time.Second, "w2's handler has slow", func() bool {
		_, err := os.Stat(started)
		return err == nil
	})
	require.Equal(t, []string{"w1 a 1 0", "w1 b 1 0", "w2 c 1 0"}, readLines(t, out), "a clean handoff: c not labelled")
	stop(w2) // kills the handler of slow: its group gets SIGTERM

	send("d")
	run("w3")
	lines := waitLines(t, out, 5, 15*time.Second)
	require.Equal(t, []string{"w3 slow 1 1", "w3 d 1 1"}, lines[3:], "slow was handed to w2's handler, which was stopped: maybe seen")
}

// TestCLI_Drain_Redelivered: drain's message outcome says redelivered
// (text: the word, only when true; --json: "redelivered" always). At epoch
// 1 nobody held the id before; above it, drain (which does not know how
// the epoch was won) labels what was stored before it began.
func TestCLI_Drain_Redelivered(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{})
	run := func(code int, args ...string) string {
		t.Helper()
		r := cli(t, env.URL, w.Name, args...)
		require.Equal(t, code, r.code, "%v: out=%q err=%q", args, r.out, r.err)
		return r.out
	}
	run(0, "send", "x", "a")
	run(0, "claim", "x", "--node", "n1")
	out := run(0, "drain", "x", "--node", "n1", "--epoch", "1", "--json")
	require.Contains(t, out, `"delivery":1,"epoch":1,"redelivered":false,"body":"a"`)
	run(0, "release", "x", "--node", "n1")
	run(0, "send", "x", "b")
	run(0, "claim", "x", "--node", "n2")
	out = run(0, "drain", "x", "--node", "n2", "--epoch", "2")
	require.Contains(t, out, "message seq=2 from=\"\" delivery=1 epoch=2 redelivered body=b\n")
}
