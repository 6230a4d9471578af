package main_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// workProc is a `fencepost work` process.
type workProc struct {
	cmd    *exec.Cmd
	stderr *syncBuffer
	done   chan struct{}
	code   int
}

type syncBuffer struct {
	mu chan struct{}
	b  bytes.Buffer
}

func newSyncBuffer() *syncBuffer { return &syncBuffer{mu: make(chan struct{}, 1)} }

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu <- struct{}{}
	defer func() { <-s.mu }()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu <- struct{}{}
	defer func() { <-s.mu }()
	return s.b.String()
}

// startWork runs fencepost work with an --exec that appends
// "node id seq epoch body" to out, one line per message.
func startWork(t *testing.T, url, w, node, out string, extra ...string) *workProc {
	t.Helper()
	script := `printf '%s %s %s %s %s\n' "$FENCEPOST_NODE" "$FENCEPOST_ID" "$FENCEPOST_SEQ" "$FENCEPOST_EPOCH" "$(cat)" >> ` + out
	args := append([]string{"work", "--node", node, "--ttl", "1s", "--exec", script}, extra...)
	p := &workProc{cmd: exec.Command(bin, args...), stderr: newSyncBuffer(), done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), "NATS_URL="+url, "FENCEPOST_WORLD="+w)
	p.cmd.Stderr = p.stderr
	p.start(t)
	return p
}

// start starts the process, notes its exit code when it exits, and kills
// it at the end of the test.
func (p *workProc) start(t *testing.T) {
	t.Helper()
	require.NoError(t, p.cmd.Start())
	go func() {
		err := p.cmd.Wait()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			p.code = ee.ExitCode()
		}
		close(p.done)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
	})
}

func (p *workProc) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(d):
		t.Fatalf("worker did not exit within %v; stderr:\n%s", d, p.stderr.String())
		return -1
	}
}

func readLines(t *testing.T, path string) []string {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	require.NoError(t, err)
	s := strings.TrimSpace(string(b))
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func waitLines(t *testing.T, path string, n int, d time.Duration) []string {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		l := readLines(t, path)
		if len(l) >= n {
			return l
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d deliveries after %v: %q", len(l), n, d, l)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestCLI_Work_DeliversAndStops(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{})
	out := filepath.Join(t.TempDir(), "out")
	p := startWork(t, env.URL, w.Name, "w1", out, "--all")
	for _, m := range [][2]string{{"a.b c", "one"}, {"x", "two"}, {"a.b c", "three"}} {
		r := cli(t, env.URL, w.Name, "send", m[0], m[1])
		require.Equal(t, 0, r.code, r.err)
	}
	lines := waitLines(t, out, 3, 10*time.Second)
	var ab []string
	for _, l := range lines {
		f := strings.Fields(l)
		require.Equal(t, "w1", f[0])
		if strings.HasPrefix(l, "w1 a.b c ") {
			ab = append(ab, f[len(f)-1])
		}
	}
	require.Equal(t, []string{"one", "three"}, ab, "in order per id")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, p.wait(t, 10*time.Second), p.stderr.String())
	r := cli(t, env.URL, w.Name, "owner", "x")
	require.Equal(t, 11, r.code, "a stopped worker frees its ids at once: %s", r.out)
}

// TestCLI_Work_SIGSTOP: a worker paused past its ttl self-fences when it
// continues, exits 3 with a SELF-FENCE line, and delivers nothing more; the
// standby has the mail.
func TestCLI_Work_SIGSTOP(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{})
	out := filepath.Join(t.TempDir(), "out")
	p1 := startWork(t, env.URL, w.Name, "w1", out, "--ids", "x")
	require.Equal(t, 0, cli(t, env.URL, w.Name, "send", "x", "m1").code)
	waitLines(t, out, 1, 10*time.Second)
	p2 := startWork(t, env.URL, w.Name, "w2", out, "--ids", "x")
	defer p2.cmd.Process.Signal(syscall.SIGTERM)

	require.NoError(t, p1.cmd.Process.Signal(syscall.SIGSTOP))
	stopped := time.Now()
	require.Equal(t, 0, cli(t, env.URL, w.Name, "send", "x", "m2").code)
	lines := waitLines(t, out, 2, 10*time.Second)
	require.True(t, strings.HasPrefix(lines[1], "w2 x "), "the standby delivers: %q", lines)
	require.Less(t, time.Since(stopped), 3*time.Second)

	require.NoError(t, p1.cmd.Process.Signal(syscall.SIGCONT))
	require.Equal(t, 3, p1.wait(t, 10*time.Second), "exit code 3 on self-fence")
	require.Contains(t, p1.stderr.String(), "SELF-FENCE: lease_watchdog_fence")
	require.Equal(t, 0, cli(t, env.URL, w.Name, "send", "x", "m3").code)
	lines = waitLines(t, out, 3, 10*time.Second)
	for _, l := range lines[1:] {
		require.True(t, strings.HasPrefix(l, "w2 "), "the paused worker delivered after its lease lapsed: %q", lines)
	}
}

// TestCLI_Work_SIGKILL: a worker killed in the middle of a handler; the
// standby delivers the id's next message within ttl + 1 s, and the message
// in flight is delivered again, labelled as maybe seen before.
func TestCLI_Work_SIGKILL(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{})
	dir := t.TempDir()
	out, started := filepath.Join(dir, "out"), filepath.Join(dir, "started")
	// w1's command for "slow" never finishes: it is killed mid-handler.
	script := `body=$(cat); if [ "$body" = slow ] && [ "$FENCEPOST_NODE" = w1 ]; then touch ` + started + `; sleep 30; fi; printf '%s %s %s\n' "$FENCEPOST_NODE" "$body" "$FENCEPOST_REDELIVERED" >> ` + out
	run := func(node string) *exec.Cmd {
		c := exec.Command(bin, "work", "--node", node, "--ttl", "1s", "--ids", "x", "--exec", script)
		c.Env = append(os.Environ(), "NATS_URL="+env.URL, "FENCEPOST_WORLD="+w.Name)
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // kill the handler with it
		require.NoError(t, c.Start())
		t.Cleanup(func() { syscall.Kill(-c.Process.Pid, syscall.SIGKILL); c.Wait() })
		return c
	}
	w1 := run("w1")
	require.Equal(t, 0, cli(t, env.URL, w.Name, "send", "x", "slow").code)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(started); err == nil {
			break
		}
		require.True(t, time.Now().Before(deadline), "w1 never started the handler")
		time.Sleep(10 * time.Millisecond)
	}
	run("w2")
	time.Sleep(200 * time.Millisecond) // w2 is only a standby: nothing to wait for but its start
	require.NoError(t, syscall.Kill(-w1.Process.Pid, syscall.SIGKILL))
	killed := time.Now()
	require.Equal(t, 0, cli(t, env.URL, w.Name, "send", "x", "next").code)
	lines := waitLines(t, out, 2, 15*time.Second)
	gap := time.Since(killed)
	t.Logf("kill to delivery of the next message: %v (ttl 1s)", gap)
	require.Less(t, gap, 2*time.Second, "ttl + 1 s")
	// Both are labelled maybe seen (FENCEPOST_REDELIVERED=1): stored
	// before w2 took the id over from w1's lapsed lease, as far as w2 can
	// tell w1 may have had them (it had slow).
	require.Equal(t, []string{"w2 slow 1", "w2 next 1"}, lines, "the message in flight is delivered again, then the next, in order")
}

// TestCLI_Work_Pool: 3 worker processes share a world with ids with mail
// (300, or FENCEPOST_POOL_IDS: 1,000 took 33 s here, one shell per
// message); one is killed with SIGKILL a third of the way through. A worker
// that self-fences on a loaded machine is restarted, as its supervisor
// would. Every message is delivered, and the epochs the deliveries carry
// show that no id was drained by two workers at once: each (id, epoch) was
// served by one node, and an id's epochs never go back.
func TestCLI_Work_Pool(t *testing.T) {
	const perID = 2
	ids := 300
	if v, err := strconv.Atoi(os.Getenv("FENCEPOST_POOL_IDS")); err == nil {
		ids = v
	}
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{})
	ctx := testutil.Ctx(t, 10*time.Minute)
	for i := range ids {
		for j := range perID {
			_, err := w.Queue.Send(ctx, "id-"+strconv.Itoa(i), []byte(strconv.Itoa(j)))
			require.NoError(t, err)
		}
	}
	out := filepath.Join(t.TempDir(), "out")
	script := `printf '%s %s %s %s\n' "$FENCEPOST_NODE" "$FENCEPOST_ID" "$FENCEPOST_EPOCH" "$(cat)" >> ` + out
	var (
		mu       sync.Mutex
		pids     = map[string]int{}
		killed   = map[string]bool{}
		restarts int
		stop     = make(chan struct{})
		wg       sync.WaitGroup
	)
	supervise := func(node string) {
		defer wg.Done()
		for {
			c := exec.Command(bin, "work", "--node", node, "--ttl", "2s", "--all", "--exec", script)
			c.Env = append(os.Environ(), "NATS_URL="+env.URL, "FENCEPOST_WORLD="+w.Name)
			c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			if c.Start() != nil {
				return
			}
			mu.Lock()
			pids[node] = c.Process.Pid
			mu.Unlock()
			c.Wait()
			mu.Lock()
			dead := killed[node]
			mu.Unlock()
			select {
			case <-stop:
				return
			default:
			}
			if dead {
				return
			}
			mu.Lock()
			restarts++
			mu.Unlock()
		}
	}
	for _, node := range []string{"w1", "w2", "w3"} {
		wg.Add(1)
		go supervise(node)
	}
	defer func() {
		close(stop)
		mu.Lock()
		for _, pid := range pids {
			syscall.Kill(-pid, syscall.SIGKILL)
		}
		mu.Unlock()
		wg.Wait()
	}()
	waitLines(t, out, ids*perID/3, 3*time.Minute)
	mu.Lock()
	killed["w2"] = true
	require.NoError(t, syscall.Kill(-pids["w2"], syscall.SIGKILL))
	mu.Unlock()

	type key struct{ id, body string }
	deadline := time.Now().Add(3 * time.Minute)
	for {
		seen := map[key]bool{}
		for _, l := range readLines(t, out) {
			if f := strings.Fields(l); len(f) == 4 {
				seen[key{f[1], f[3]}] = true
			}
		}
		if len(seen) == ids*perID {
			break
		}
		require.True(t, time.Now().Before(deadline), "%d of %d messages delivered", len(seen), ids*perID)
		time.Sleep(50 * time.Millisecond)
	}
	owner := map[string]string{} // id/epoch -> node
	last := map[string]uint64{}  // id -> last epoch
	nodes := map[string]int{}
	for _, l := range readLines(t, out) {
		f := strings.Fields(l)
		if len(f) == 3 && f[0] == "w2" {
			// A handler of the SIGKILLed worker that ran on with its
			// stdin closed (the kernel kills the handler's shell with
			// its parent, docs/design.md 4.5, but not always before the
			// shell's own line is written): an empty body, not a
			// delivery.
			continue
		}
		require.Len(t, f, 4, l)
		epoch, err := strconv.ParseUint(f[2], 10, 64)
		require.NoError(t, err)
		k := f[1] + "/" + f[2]
		if n, ok := owner[k]; ok {
			require.Equal(t, n, f[0], "%s epoch %d served by two nodes", f[1], epoch)
		}
		owner[k] = f[0]
		require.GreaterOrEqual(t, epoch, last[f[1]], "%s: epochs went back", f[1])
		last[f[1]] = epoch
		nodes[f[0]]++
	}
	mu.Lock()
	t.Logf("deliveries per node: %v; restarts after a self-fence: %d", nodes, restarts)
	mu.Unlock()
}

// TestCLI_Work_CommitsAsItGoes: a worker whose handler takes a while
// commits while it works (a newcomer's report: the cursor stayed at
// 0 until the end of a batch, so a crash redelivered up to 1,000 handled
// messages). Here 10 messages take 3 s to handle; the cursor moves past
// the first ones long before the last is handled.
func TestCLI_Work_CommitsAsItGoes(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{})
	for i := range 10 {
		require.Equal(t, 0, cli(t, env.URL, w.Name, "send", "x", strconv.Itoa(i)).code)
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	script := `cat >/dev/null; echo "$FENCEPOST_SEQ" >> ` + out + `; exec sleep 0.3`
	c := exec.Command(bin, "work", "--node", "n1", "--ttl", "5s", "--ids", "x", "--exec", script)
	c.Env = append(os.Environ(), "NATS_URL="+env.URL, "FENCEPOST_WORLD="+w.Name)
	require.NoError(t, c.Start())
	t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	deadline := time.Now().Add(20 * time.Second)
	for {
		r := cli(t, env.URL, w.Name, "stat", "x", "--json")
		require.Equal(t, 0, r.code, r.err)
		var st struct {
			Cursor uint64 `json:"cursor"`
			Depth  uint64 `json:"depth"`
		}
		require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(r.out)), &st), r.out)
		if st.Cursor > 0 {
			require.NotZero(t, st.Depth, "committed only once everything was handled")
			return
		}
		require.True(t, time.Now().Before(deadline), "the cursor never moved while the worker ran")
		time.Sleep(100 * time.Millisecond)
	}
}
