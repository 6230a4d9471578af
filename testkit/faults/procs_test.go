package faults

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/server"
	"github.com/fencepost/fencepost/testkit/history"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/worker"
)

// The test binary runs in three roles, chosen by FP_FAULTS_ROLE: the tests
// (unset), an owner process ("owner") and a server process ("server").
const envRole = "FP_FAULTS_ROLE"

func TestMain(m *testing.M) {
	switch os.Getenv(envRole) {
	case "owner":
		os.Exit(ownerMain())
	case "server":
		os.Exit(serverMain())
	case "clockprobe":
		os.Exit(clockProbeMain())
	}
	testutil.VerifyNoLeaks(m)
}

// quiet logs errors only; FP_FAULTS_LOG=debug (or info, warn) logs more,
// in the owner processes too, to see where a run spends its time.
var quiet = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: logLevel()}))

func logLevel() slog.Level {
	var l slog.Level
	if v := os.Getenv("FP_FAULTS_LOG"); v == "" || l.UnmarshalText([]byte(v)) != nil {
		return slog.LevelError
	}
	return l
}

func natsOpts() client.Option {
	return client.WithNATSOptions(nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.Timeout(2*time.Second), nats.ReconnectJitter(10*time.Millisecond, 10*time.Millisecond))
}

// ownerMain is an owner process: a worker.Worker serving FP_IDS of FP_WORLD
// as FP_NODE (with FP_STATE=true, counting each id's messages in its state:
// counting), reporting every delivery and every stored commit on fd 3 (one
// write per line, made before the handler returns and before the drain goes
// on after a commit), and a line "F <cause>" when the worker stops. It exits
// 3 after a self-fence, as `fencepost work` does.
func ownerMain() int {
	if spec := os.Getenv("FP_CLOCK"); spec != "" {
		cs, err := parseClockSpec(spec)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		installClock(cs) // before anything reads the time
	}
	url, worldName, node := os.Getenv("FP_URL"), os.Getenv("FP_WORLD"), os.Getenv("FP_NODE")
	ttl, _ := time.ParseDuration(os.Getenv("FP_TTL"))
	var ids []string // none: every id of the world
	if v := os.Getenv("FP_IDS"); v != "" {
		ids = strings.Split(v, ",")
	}
	out := os.NewFile(3, "report")
	var mu sync.Mutex
	write := func(line string) {
		mu.Lock()
		defer mu.Unlock()
		if _, err := out.Write([]byte(line)); err != nil {
			os.Exit(4) // the parent is gone
		}
	}
	c, err := client.Connect(url, client.WithTimeout(2*time.Second), client.WithLogger(quiet), natsOpts())
	if err != nil {
		write("F\tconnect: " + err.Error() + "\n")
		return 1
	}
	defer c.Close()
	var cw *client.World
	for deadline := time.Now().Add(30 * time.Second); ; {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		cw, err = c.World(ctx, worldName)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			write("F\tworld: " + err.Error() + "\n")
			return 1
		}
		time.Sleep(50 * time.Millisecond)
	}
	work, _ := time.ParseDuration(os.Getenv("FP_WORK"))
	h := func(_ context.Context, m drain.Message) error {
		at := realNow() // the true time: the checker compares it across processes
		write(fmt.Sprintf("D\t%s\t%d\t%s\t%d\t%d\t%d\t%s\n", m.ID, m.Seq, m.Fence.Node, m.Fence.Epoch, m.Fence.Revision, at.UnixNano(), m.Body))
		if work > 0 {
			time.Sleep(work) // the handler's work
		}
		return nil
	}
	obs := drain.WithCommitObserver(func(cm drain.Commit) {
		write(fmt.Sprintf("C\t%s\t%s\t%d\t%d\t%d\t%d\t%d\n", cm.ID, cm.Node, cm.Epoch, cm.Revision, cm.Cursor, cm.StreamSeq, realNow().UnixNano()))
	})
	cfg := worker.Config{Node: node, TTL: ttl, IDs: ids, Log: quiet.With("node", node), DrainOptions: []drain.Option{obs}}
	if os.Getenv("FP_STATE") == "true" { // a counter round: count in the id's state
		cfg.State, h = true, counting(h).Handler()
	}
	wk, err := cw.NewWorker(cfg, h)
	if err != nil {
		write("F\tworker: " + err.Error() + "\n")
		return 1
	}
	err = wk.Run(context.Background())
	write(fmt.Sprintf("F\t%v\n", err))
	return 3
}

// parseReport records one line of an owner's report; it returns the cause
// of an "F" line.
func parseReport(rec *history.Recorder, line string) (fence string, err error) {
	f := strings.Split(line, "\t")
	u := func(i int) uint64 {
		if err != nil {
			return 0
		}
		var v uint64
		v, err = strconv.ParseUint(f[i], 10, 64)
		return v
	}
	switch {
	case f[0] == "D" && len(f) == 8:
		d := history.Delivery{ID: f[1], Seq: u(2), Node: f[3], Epoch: u(4), Revision: u(5), At: time.Unix(0, int64(u(6))), Key: f[7]}
		if err == nil {
			rec.Deliver(d)
		}
	case f[0] == "C" && len(f) == 8:
		c := history.Commit{ID: f[1], Node: f[2], Epoch: u(3), Revision: u(4), Cursor: u(5), StreamSeq: u(6), At: time.Unix(0, int64(u(7)))}
		if err == nil {
			rec.Commit(c)
		}
	case f[0] == "F" && len(f) == 2:
		return f[1], nil
	default:
		return "", fmt.Errorf("bad report line %q", line)
	}
	return "", err
}

// serverMain is a server process: an embedded nats-server on FP_PORT with
// its store in FP_STORE, fsync on every write when FP_SYNC=always, else
// fencepostd's default interval (1 s). It prints READY and serves until it
// is killed.
func serverMain() int {
	port, _ := strconv.Atoi(os.Getenv("FP_PORT"))
	cfg := server.Config{StoreDir: os.Getenv("FP_STORE"), Port: port}
	if os.Getenv("FP_SYNC") == "always" {
		cfg.SyncAlways = true
	} else {
		cfg.SyncInterval = time.Second
	}
	s, err := server.Start(cfg)
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	defer s.Stop()
	fmt.Println("READY")
	select {}
}

func selfCmd(env ...string) (*exec.Cmd, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = os.Stderr
	return cmd, nil
}

// serverProc is a nats-server in a child process that can be crashed
// (SIGKILL) and started again on the same store and port.
type serverProc struct {
	store, sync string
	port        int
	cmd         *exec.Cmd
}

func (s *serverProc) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", s.port) }

func (s *serverProc) start() error {
	cmd, err := selfCmd(envRole+"=server", "FP_STORE="+s.store, "FP_SYNC="+s.sync, fmt.Sprintf("FP_PORT=%d", s.port))
	if err != nil {
		return err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "READY" {
		cmd.Process.Kill()
		cmd.Wait()
		return fmt.Errorf("server process: %q %v", line, err)
	}
	go io.Copy(io.Discard, out)
	s.cmd = cmd
	return nil
}

// crash kills the server process with SIGKILL: no shutdown, no flush.
func (s *serverProc) crash() {
	if s.cmd != nil {
		s.cmd.Process.Signal(syscall.SIGKILL)
		s.cmd.Wait()
		s.cmd = nil
	}
}

// owners supervises owner processes, one per slot, restarting each one a
// ttl after it exits (as systemd's Restart= would), and records what they
// report.
type owners struct {
	t        testing.TB
	rec      *history.Recorder
	env      []string
	slotEnv  func(slot int) []string // a slot's own environment (URL, clock)
	ttl      time.Duration
	stopping atomic.Bool
	stopCh   chan struct{}
	wg       sync.WaitGroup

	mu      sync.Mutex
	running map[int]*ownerProc
	all     []*ownerProc

	Starts, Fences, BadLines atomic.Int64
	fenceCauses              sync.Map // cause -> *atomic.Int64
}

type ownerProc struct {
	slot   int
	node   string
	cmd    *exec.Cmd
	exited chan struct{}
	fence  atomic.Value // string: the F line's cause
	active atomic.Int64 // deliveries reported
	born   time.Time
	died   atomic.Int64 // unix nanos of its exit
}

func startOwners(t testing.TB, rec *history.Recorder, n int, ttl time.Duration, slotEnv func(int) []string, env ...string) *owners {
	o := &owners{t: t, rec: rec, env: env, slotEnv: slotEnv, ttl: ttl, stopCh: make(chan struct{}), running: map[int]*ownerProc{}}
	for slot := 0; slot < n; slot++ {
		o.wg.Add(1)
		go o.supervise(slot)
	}
	return o
}

func (o *owners) supervise(slot int) {
	defer o.wg.Done()
	node := fmt.Sprintf("owner-%d", slot)
	for !o.stopping.Load() {
		p, err := o.start(slot, node)
		if err != nil {
			o.t.Errorf("owner %s: %v", node, err)
			return
		}
		<-p.exited
		o.mu.Lock()
		delete(o.running, slot)
		o.mu.Unlock()
		select {
		case <-o.stopCh:
			return
		case <-time.After(o.ttl): // a supervisor restarts after at least one ttl
		}
	}
}

func (o *owners) start(slot int, node string) (*ownerProc, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	env := append([]string{envRole + "=owner", "FP_NODE=" + node, fmt.Sprintf("FP_TTL=%v", o.ttl)}, o.env...)
	if o.slotEnv != nil {
		env = append(env, o.slotEnv(slot)...)
	}
	cmd, err := selfCmd(env...)
	if err != nil {
		return nil, err
	}
	cmd.ExtraFiles = []*os.File{w}
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		return nil, err
	}
	w.Close()
	o.Starts.Add(1)
	p := &ownerProc{slot: slot, node: node, cmd: cmd, exited: make(chan struct{}), born: time.Now()}
	o.mu.Lock()
	o.running[slot] = p
	o.all = append(o.all, p)
	if o.stopping.Load() {
		cmd.Process.Signal(syscall.SIGKILL)
	}
	o.mu.Unlock()
	go func() {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "D\t") {
				p.active.Add(1)
			}
			cause, err := parseReport(o.rec, sc.Text())
			if err != nil {
				o.BadLines.Add(1)
				o.t.Errorf("owner %s: %v", node, err)
			}
			if cause != "" {
				p.fence.Store(cause)
				if strings.Contains(cause, "fence") {
					o.Fences.Add(1)
				}
				v, _ := o.fenceCauses.LoadOrStore(cause, new(atomic.Int64))
				v.(*atomic.Int64).Add(1)
			}
		}
		r.Close()
		cmd.Wait()
		p.died.Store(time.Now().UnixNano())
		close(p.exited)
	}()
	return p, nil
}

// pick returns a running owner process chosen by n, or nil; it prefers
// the owners that made the last delivery of some id (they hold ids).
func (o *owners) pick(n int) *ownerProc {
	holders := o.rec.Holders()
	o.mu.Lock()
	defer o.mu.Unlock()
	var ps, all []*ownerProc
	for slot := 0; slot < 16; slot++ {
		if p, ok := o.running[slot]; ok {
			all = append(all, p)
			if holders[p.node] > 0 {
				ps = append(ps, p)
			}
		}
	}
	if len(ps) == 0 {
		ps = all
	}
	if len(ps) == 0 {
		return nil
	}
	return ps[n%len(ps)]
}

// stop kills every owner process and waits for the supervisors.
func (o *owners) stop() {
	o.mu.Lock()
	o.stopping.Store(true)
	close(o.stopCh)
	for _, p := range o.running {
		p.cmd.Process.Signal(syscall.SIGKILL)
		p.cmd.Process.Signal(syscall.SIGCONT)
	}
	o.mu.Unlock()
	o.wg.Wait()
}

// lives is the longest life of an owner process per slot (to the end of
// the run for one still running).
func (o *owners) lives() map[int]time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[int]time.Duration{}
	for _, p := range o.all {
		end := time.Now()
		if d := p.died.Load(); d != 0 {
			end = time.Unix(0, d)
		}
		if l := end.Sub(p.born); l > out[p.slot] {
			out[p.slot] = l
		}
	}
	return out
}

// slot returns the running owner process of slot, or nil.
func (o *owners) slot(slot int) *ownerProc {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.running[slot]
}

func (o *owners) causes() string {
	var b []string
	o.fenceCauses.Range(func(k, v any) bool {
		b = append(b, fmt.Sprintf("%q:%d", k, v.(*atomic.Int64).Load()))
		return true
	})
	return strings.Join(b, " ")
}

var errStopped = errors.New("stopped")
