package verify

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fencepost/fencepost/internal/tailbuf"
	"github.com/fencepost/fencepost/testkit/history"
)

// owners supervises the owner processes, one per slot, restarting each
// one a ttl after it exits (as a supervisor would), and records what they
// report: deliveries into rec (and timers' into ct), commits into
// reported.
type owners struct {
	cfg      Config
	spec     ownerSpec
	rec      *history.Recorder
	ct       *ctLog
	reported *commitLog
	stopping atomic.Bool
	stopCh   chan struct{}
	wg       sync.WaitGroup

	mu      sync.Mutex
	running map[int]*ownerProc
	last    *ownerProc
	causes  map[string]int
	errs    []string

	starts, badLines atomic.Int64
}

type ownerProc struct {
	node   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	exited chan struct{}
	stderr *tailbuf.Buffer
}

func startOwners(cfg Config, spec ownerSpec, rec *history.Recorder, ct *ctLog, reported *commitLog) *owners {
	o := &owners{cfg: cfg, spec: spec, rec: rec, ct: ct, reported: reported, stopCh: make(chan struct{}), running: map[int]*ownerProc{}, causes: map[string]int{}}
	for slot := range cfg.Owners {
		o.wg.Add(1)
		go o.supervise(slot)
	}
	return o
}

func (o *owners) supervise(slot int) {
	defer o.wg.Done()
	for gen := 1; !o.stopping.Load(); gen++ {
		p, err := o.start(slot, fmt.Sprintf("owner-%d.%d", slot, gen))
		if err != nil {
			o.fail(err.Error())
			return
		}
		<-p.exited
		o.mu.Lock()
		delete(o.running, slot)
		o.mu.Unlock()
		select {
		case <-o.stopCh:
			return
		case <-time.After(o.cfg.TTL):
		}
	}
}

func (o *owners) fail(msg string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.errs) < 10 {
		o.errs = append(o.errs, msg)
	}
}

// start starts one owner process as node in slot.
func (o *owners) start(slot int, node string) (*ownerProc, error) {
	spec := o.spec
	spec.Node = node
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	cmd := o.cfg.OwnerCommand()
	p := &ownerProc{node: node, cmd: cmd, exited: make(chan struct{}), stderr: &tailbuf.Buffer{Max: 4 << 10}}
	cmd.Stderr = p.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("verify: start an owner process: %w", err)
	}
	o.starts.Add(1)
	_, _ = p.stdin.Write(append(b, '\n'))
	o.mu.Lock()
	o.running[slot], o.last = p, p
	if o.stopping.Load() {
		_ = cmd.Process.Kill()
	}
	o.mu.Unlock()
	go o.read(p, out)
	return p, nil
}

// read records the reports of p until it exits.
func (o *owners) read(p *ownerProc, out io.Reader) {
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		r, err := parseReport(sc.Text())
		switch {
		case err != nil:
			o.badLines.Add(1)
			o.fail(fmt.Sprintf("owner %s: %v", p.node, err))
		case r.kind == 'D':
			o.ct.deliver(r.delivery.Key, r.delivery.Seq, r.posted)
			o.rec.Deliver(r.delivery)
		case r.kind == 'C':
			o.reported.add(r.commit)
		case r.kind == 'F':
			o.mu.Lock()
			o.causes[causeKind(r.cause)]++
			o.mu.Unlock()
		}
	}
	_ = p.cmd.Wait()
	close(p.exited)
}

// causeKind shortens a stop cause to its kind (the self-fence causes of
// docs/contract.md section 5, or the first words of an error).
func causeKind(c string) string {
	for _, k := range []string{"lease_watchdog_fence", "lease_record_missing_fence", "lease_record_mismatch_fence"} {
		if strings.Contains(c, k) {
			return k
		}
	}
	if c == "<nil>" || strings.Contains(c, "context canceled") {
		return "stopped"
	}
	if len(c) > 60 {
		c = c[:60]
	}
	return c
}

// pick returns a running owner chosen by n among those that made the last
// delivery of some id (they hold ids), else among all; nil if none runs.
func (o *owners) pick(n int) *ownerProc {
	holders := o.rec.Holders()
	o.mu.Lock()
	defer o.mu.Unlock()
	var ps, all []*ownerProc
	slots := make([]int, 0, len(o.running))
	for s := range o.running {
		slots = append(slots, s)
	}
	sort.Ints(slots)
	for _, s := range slots {
		p := o.running[s]
		all = append(all, p)
		if holders[p.node] > 0 {
			ps = append(ps, p)
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

// stop ends every owner: stdin closed (a graceful stop), SIGCONT for a
// stopped one, SIGKILL after grace; then waits for the supervisors.
func (o *owners) stop(grace time.Duration) {
	o.mu.Lock()
	o.stopping.Store(true)
	close(o.stopCh)
	all := make([]*ownerProc, 0, len(o.running))
	for _, p := range o.running {
		all = append(all, p)
	}
	o.mu.Unlock()
	for _, p := range all {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		_ = p.stdin.Close()
	}
	deadline := time.After(grace)
	for _, p := range all {
		select {
		case <-p.exited:
		case <-deadline:
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	}
	o.wg.Wait()
}

// summary is the owners' figures for the result.
func (o *owners) summary() (starts int64, causes map[string]int, errs []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	causes = map[string]int{}
	for k, v := range o.causes {
		causes[k] = v
	}
	return o.starts.Load(), causes, append([]string(nil), o.errs...)
}

// lastStderr is the end of the stderr of the owner started last.
func (o *owners) lastStderr() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.last == nil {
		return ""
	}
	return o.last.stderr.String()
}
