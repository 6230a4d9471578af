package main_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// startSleeper runs `fencepost work` on id with a handler that writes its
// process group id to dir/pgid.<seq> and then sleeps (a child of the
// handler's shell, so in its group).
func startSleeper(t *testing.T, url, w, node, id, dir string) *workProc {
	t.Helper()
	script := `echo $$ > ` + dir + `/pgid.$FENCEPOST_SEQ; sleep 30; echo late >> ` + dir + `/late`
	p := &workProc{cmd: exec.Command(bin, "work", "--node", node, "--ttl", "1s", "--ids", id, "--grace", "1s", "--exec", script), stderr: newSyncBuffer(), done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), "NATS_URL="+url, "FENCEPOST_WORLD="+w)
	p.cmd.Stderr = p.stderr
	require.NoError(t, p.cmd.Start())
	go func() {
		p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// handlerGroup waits for the first handler's process group id.
func handlerGroup(t *testing.T, dir string) int {
	t.Helper()
	var pgid int
	testutil.WaitFor(t, 10*time.Second, "the handler started", func() bool {
		m, _ := filepath.Glob(filepath.Join(dir, "pgid.*"))
		if len(m) == 0 {
			return false
		}
		b, err := os.ReadFile(m[0])
		if err != nil {
			return false
		}
		pgid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	})
	require.NoError(t, syscall.Kill(-pgid, 0), "the handler's group is alive")
	return pgid
}

func groupGone(pgid int) bool { return syscall.Kill(-pgid, 0) == syscall.ESRCH }

// TestCLI_Work_HandlerStopsWithItsHolding: a forced seize of the id stops
// the running --exec handler's whole process group (its sleeping child
// too), at once rather than at the next commit; so does stopping the
// worker. Before, the command ran on under the old epoch and its children
// outlived the worker.
func TestCLI_Work_HandlerStopsWithItsHolding(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{MinTTL: time.Second})
	ctx := testutil.Ctx(t, time.Minute)

	t.Run("seized", func(t *testing.T) {
		dir := t.TempDir()
		_, err := w.Send(ctx, "x", []byte("slow"))
		require.NoError(t, err)
		p := startSleeper(t, env.URL, w.Name, "w1", "x", dir)
		pgid := handlerGroup(t, dir)
		_, err = w.Ownership.Seize(ctx, "x", "ops", time.Minute, true)
		require.NoError(t, err)
		testutil.WaitFor(t, 5*time.Second, "the handler's group stopped after the seize", func() bool { return groupGone(pgid) })
		select {
		case <-p.done:
			t.Fatalf("the worker exited; it should only have let the id go:\n%s", p.stderr.String())
		default:
		}
		require.NoFileExists(t, filepath.Join(dir, "late"), "the handler went on after its holding was lost")
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	})

	t.Run("worker stopped", func(t *testing.T) {
		dir := t.TempDir()
		_, err := w.Send(ctx, "y", []byte("slow"))
		require.NoError(t, err)
		p := startSleeper(t, env.URL, w.Name, "w2", "y", dir)
		pgid := handlerGroup(t, dir)
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT))
		p.wait(t, 10*time.Second)
		testutil.WaitFor(t, 5*time.Second, "the handler's group stopped with the worker", func() bool { return groupGone(pgid) })
	})
}
