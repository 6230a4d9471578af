package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/mailbox"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// TestProducerWorker_StopLeavesNoHoldings: examples/producer posts,
// examples/worker delivers every message, and once stopped (SIGTERM, exit
// 0) it holds nothing: its ids are free for the next worker at once and
// `ls --held-by` names none. (Their records stay, free, with their last
// epoch: epochs never repeat, so only a reset of the world drops them.)
func TestProducerWorker_StopLeavesNoHoldings(t *testing.T) {
	env := testutil.Start(t, testutil.Target{Name: "single"})
	w := env.World(t, world.Config{})
	ctx := testutil.Ctx(t, 2*time.Minute)
	dir := t.TempDir()
	out, err := exec.Command("go", "build", "-o", dir+string(filepath.Separator), ".", "../producer").CombinedOutput()
	require.NoError(t, err, string(out))
	environ := append(os.Environ(), "NATS_URL="+env.URL)

	ids := []string{"order-1", "order-2", "order-3"}
	producer := exec.CommandContext(ctx, filepath.Join(dir, "producer"), "--world", w.Name, "--ids", strings.Join(ids, ","), "--count", "3")
	producer.Env = environ
	out, err = producer.CombinedOutput()
	require.NoError(t, err, string(out))
	require.Equal(t, 9, strings.Count(string(out), "posted id="), string(out))

	worker := exec.CommandContext(ctx, filepath.Join(dir, "worker"), "--world", w.Name, "--node", "wk1")
	worker.Env = environ
	stdout, err := worker.StdoutPipe()
	require.NoError(t, err)
	var stderr syncBuffer
	worker.Stderr = &stderr
	require.NoError(t, worker.Start())
	delivered := map[string]bool{}
	lines := bufio.NewScanner(stdout)
	for len(delivered) < 9 && lines.Scan() {
		f := strings.Fields(lines.Text()) // node=wk1 id=order-1 seq=1 epoch=1 delivery=1 body="..."
		require.GreaterOrEqual(t, len(f), 3, lines.Text())
		delivered[f[1]+" "+f[2]] = true
	}
	require.Len(t, delivered, 9, "every message delivered; stderr: %s", stderr.String())

	require.NoError(t, worker.Process.Signal(syscall.SIGTERM))
	for lines.Scan() { // to the end: the worker exits
	}
	require.NoError(t, worker.Wait(), "exit 0 on SIGTERM; stderr: %s", stderr.String())

	for _, id := range ids {
		st, err := w.Ownership.Owner(ctx, id)
		require.NoError(t, err)
		require.False(t, st.Held, "%s is free once the worker stopped: %+v", id, st)
		require.GreaterOrEqual(t, st.Epoch, uint64(1), "its record stays, with its last epoch")
	}
	page, err := w.Mailboxes.List(ctx, mailbox.ListOptions{HeldBy: "wk1", Limit: 10})
	require.NoError(t, err)
	require.Empty(t, page.Entries)
}

// syncBuffer is a bytes.Buffer a process writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
