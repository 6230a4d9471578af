package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/internal/tailbuf"
	"github.com/fencepost/fencepost/ownership"
)

// Fault kinds of the takeover and handoff scenarios.
const (
	FaultKill  = "kill"  // SIGKILL: a crash, the lease lapses after its ttl
	FaultStop  = "stop"  // SIGSTOP past the ttl, then SIGCONT: the woken owner must be fenced
	FaultSeize = "seize" // another node force-seizes the owner's ids (then releases them)
	FaultTerm  = "term"  // SIGTERM: a graceful stop that releases every id at once (handoff)
	// FaultNone, alone in Config.Faults, injects none: the owners' cost
	// without takeovers (what reading every post in every owner process
	// costs: docs/design/pipeline.md).
	FaultNone = "none"
)

// Fault is one injected fault.
type Fault struct {
	At    float64 `json:"at_s"` // seconds since the run started
	Kind  string  `json:"kind"`
	Node  string  `json:"node"`
	IDs   int     `json:"ids"`    // ids the victim held at the fault
	GapMs float64 `json:"gap_ms"` // the longest takeover gap of those ids; -1: not measured
}

// GapStats summarises the takeover gaps of one fault kind: from the fault
// (signal sent, or seize written) to the first delivery of each of the
// victim's ids under a newer epoch.
type GapStats struct {
	Faults     int     `json:"faults"`
	Samples    int     `json:"samples"`    // ids taken over
	Unmeasured int     `json:"unmeasured"` // ids with no delivery under a newer epoch
	P50        float64 `json:"p50_ms"`
	P99        float64 `json:"p99_ms"`
	Max        float64 `json:"max_ms"`
	// The part of the gap until the broker stored the new holder's claim
	// (the rest is the new holder's first drain getting to its handler).
	ClaimP50 float64 `json:"claim_p50_ms"`
	ClaimP99 float64 `json:"claim_p99_ms"`
	// The gaps split by what the id's first delivery under a newer epoch
	// was. Pending: a message posted before the fault, so the gap is the
	// takeover's delay. Idle: one posted after it (the id had no mail
	// waiting, as most of zipf's ids): the gap above also counts the wait
	// for that post, so here it runs from the later of the fault and the
	// post instead.
	PendingSamples int     `json:"pending_samples"`
	PendingP99     float64 `json:"pending_p99_ms"`
	IdleSamples    int     `json:"idle_samples"`
	IdleP99        float64 `json:"idle_p99_ms"`
}

type gapSample struct {
	id    string
	epoch uint64 // at the fault
	at    int64  // the fault, unix nanos
	kind  string
	fault int   // index in procSet.faults
	first int64 // the first delivery under a newer epoch, unix nanos; 0: none yet
	sent  int64 // when the message of that delivery was posted, unix nanos
}

// proc is one owner process.
type proc struct {
	node    string
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	ready   chan struct{}
	done    chan struct{}
	once    sync.Once
	planned atomic.Bool // a fault or the shutdown ends it
	fenced  atomic.Value
	stderr  *tailbuf.Buffer
	exit    error
}

// procSet runs the owner processes of a takeover or handoff run, and the
// faults.
type procSet struct {
	cfg   Config
	spec  ownerSpec
	s     *side
	led   *ledger       // ours: the ledger (nil: the pcgroups side)
	w     *client.World // ours: the world (nil: the pcgroups side)
	peer  *pinTracker   // the pcgroups side's deliveries (nil: ours)
	kinds []string
	errs  chan error

	mu        sync.Mutex
	procs     map[string]*proc
	n         int
	gaps      map[string][]*gapSample
	samples   []*gapSample
	faults    []Fault
	closing   bool
	nFaults   atomic.Int64
	cpu       atomic.Int64 // CPU time of the owner processes that exited, in ns
	procsSeen atomic.Int64 // the GOMAXPROCS the last owner to start said it runs with
	unplanned atomic.Int64
	readers   sync.WaitGroup
	spawns    sync.WaitGroup // replacements being started
	conts     sync.WaitGroup // SIGCONTs to come
}

func newProcSet(cfg Config, s *side, led *ledger, w *client.World, url string) *procSet {
	return &procSet{
		cfg: cfg, s: s, led: led, w: w, kinds: faultKinds(cfg),
		spec:  ownerSpec{URL: url, World: w.Name, TTLms: cfg.TTL.Milliseconds(), State: cfg.Scenario == ScenarioCounter},
		errs:  make(chan error, 16),
		procs: map[string]*proc{},
		gaps:  map[string][]*gapSample{},
	}
}

// faultKinds are the faults injected in turn: Config.Faults, or the
// scenario's.
func faultKinds(cfg Config) []string {
	switch {
	case len(cfg.Faults) > 0:
		return cfg.Faults
	case cfg.Scenario == ScenarioHandoff:
		return []string{FaultTerm}
	}
	return []string{FaultKill, FaultStop, FaultSeize}
}

func (ps *procSet) report(err error) {
	select {
	case ps.errs <- err:
	default:
	}
}

// spawn starts an owner process and waits until it holds its node lease.
func (ps *procSet) spawn(ctx context.Context) (*proc, error) {
	ps.mu.Lock()
	if ps.closing {
		ps.mu.Unlock()
		return nil, errors.New("bench: owners are stopping")
	}
	ps.n++
	node := fmt.Sprintf("owner-%d", ps.n)
	ps.mu.Unlock()
	spec := ps.spec
	spec.Node = node
	if ps.cfg.auth != nil {
		creds, err := ps.cfg.auth.nodeCreds(node)
		if err != nil {
			return nil, err
		}
		spec.Creds = creds
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(ps.cfg.OwnerExe)
	cmd.Env = ownerEnv(os.Environ(), string(b), ps.cfg.OwnerGOMAXPROCS)
	p := &proc{node: node, cmd: cmd, ready: make(chan struct{}), done: make(chan struct{}), stderr: &tailbuf.Buffer{Max: 16 << 10}}
	cmd.Stderr = p.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: start an owner (%s): %w", ps.cfg.OwnerExe, err)
	}
	ps.mu.Lock()
	ps.procs[node] = p
	ps.mu.Unlock()
	ps.readers.Add(1)
	go func() {
		defer ps.readers.Done()
		if err := scanLines(stdout, func(line string) { ps.onLine(p, line) }); err != nil {
			ps.report(fmt.Errorf("bench: reading owner %s: %w", node, err))
		}
		p.exit = cmd.Wait()
		if st := cmd.ProcessState; st != nil {
			ps.cpu.Add(int64(st.UserTime() + st.SystemTime()))
		}
		close(p.done)
		ps.exited(p)
	}()
	select {
	case <-p.ready:
		return p, nil
	case <-p.done:
		return nil, fmt.Errorf("bench: owner %s exited before it was ready (%v): %s", node, p.exit, p.stderr.String())
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(60 * time.Second):
		return nil, fmt.Errorf("bench: owner %s not ready within 60 s: %s", node, p.stderr.String())
	}
}

// ownerEnv is the environment of an owner process: the bench's own, the
// owner spec and, when gomaxprocs is above 0, GOMAXPROCS (last, so that
// it wins over one the bench inherited: os/exec uses the last value of a
// key given twice).
func ownerEnv(base []string, spec string, gomaxprocs int) []string {
	env := append(slices.Clip(base), OwnerEnv+"="+spec)
	if gomaxprocs > 0 {
		env = append(env, "GOMAXPROCS="+strconv.Itoa(gomaxprocs))
	}
	return env
}

func (ps *procSet) onLine(p *proc, line string) {
	l, err := parseOwnerLine(line)
	if err != nil {
		ps.report(fmt.Errorf("bench: owner %s: %w", p.node, err))
		return
	}
	switch l.kind {
	case 'r':
		if l.n > 0 {
			ps.procsSeen.Store(int64(l.n))
		}
		p.once.Do(func() { close(p.ready) })
	case 'f':
		p.fenced.Store(l.text)
	case 'd':
		idx, ok := ps.s.ids[l.id]
		if !ok {
			idx = -1
		}
		epoch := l.epoch
		if ps.peer != nil {
			// A member process says the member, not an epoch: the
			// tracker makes one of the processes that delivered the id.
			epoch = ps.peer.delivered(p.node, l.id, int(l.epoch))
		}
		ps.s.deliverAt(idx, l.n, int64(l.sent), int64(l.at))
		unit := l.id // the key of the takeover gaps: the unit of the record (a sharded world's shard)
		if ps.led != nil {
			ps.led.delivery(l.id, l.seq, l.epoch, int64(l.at), l.n != 0)
			unit = ps.led.unit(l.id)
		}
		ps.observe(unit, epoch, int64(l.sent), int64(l.at))
	}
}

// exited handles the end of an owner process: one that no fault or
// shutdown ended is replaced, and counted.
func (ps *procSet) exited(p *proc) {
	ps.mu.Lock()
	delete(ps.procs, p.node)
	closing := ps.closing
	ps.mu.Unlock()
	if p.planned.Load() || closing {
		return
	}
	ps.unplanned.Add(1)
	ps.cfg.Log.Warn("bench: an owner exited unexpectedly; starting a replacement", "node", p.node, "exit", p.exit, "fenced", p.fenced.Load(), "stderr", p.stderr.String())
	ps.spawns.Add(1)
	go func() {
		defer ps.spawns.Done()
		if _, err := ps.spawn(context.Background()); err != nil {
			ps.report(err)
		}
	}()
}

// observe records a delivery for the open takeover gaps of id.
func (ps *procSet) observe(id string, epoch uint64, sent, at int64) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for _, g := range ps.gaps[id] {
		if epoch > g.epoch && at >= g.at && (g.first == 0 || at < g.first) {
			g.first, g.sent = at, sent
		}
	}
}

// victim picks a running owner that holds at least one id, and its ids.
func (ps *procSet) victim() (*proc, map[string]uint64) {
	var recs map[string]recState
	if ps.peer != nil {
		recs = ps.peer.holders()
	} else {
		recs = ps.led.holders()
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	held := map[string]map[string]uint64{}
	for id, r := range recs {
		if p, ok := ps.procs[r.node]; ok && r.held && !p.planned.Load() {
			if held[r.node] == nil {
				held[r.node] = map[string]uint64{}
			}
			held[r.node][id] = r.epoch
		}
	}
	nodes := make([]string, 0, len(held))
	for n := range held {
		nodes = append(nodes, n)
	}
	if len(nodes) == 0 {
		return nil, nil
	}
	sort.Strings(nodes)
	n := nodes[rand.IntN(len(nodes))]
	return ps.procs[n], held[n]
}

// fault injects the next fault: a victim holding ids is picked and hit;
// the other owners (standbys included) take its ids over. A process that
// a fault ends is replaced by a new standby, started in the background so
// that the schedule does not wait for it.
func (ps *procSet) fault(ctx context.Context) error {
	kind := ps.kinds[int(ps.nFaults.Load())%len(ps.kinds)]
	// Right after a fault the survivors may not have claimed its ids yet:
	// wait up to half a period for an owner that holds one.
	var p *proc
	var held map[string]uint64
	_ = pollUntil(ctx, ps.cfg.FaultEvery/2, func() bool {
		p, held = ps.victim()
		return p != nil
	})
	if p == nil {
		ps.cfg.Log.Warn("bench: no owner holds an id; fault skipped", "kind", kind)
		return nil
	}
	at := time.Now()
	switch kind {
	case FaultKill, FaultStop, FaultTerm:
		sig := map[string]syscall.Signal{FaultKill: syscall.SIGKILL, FaultStop: syscall.SIGSTOP, FaultTerm: syscall.SIGTERM}[kind]
		struck, err := ps.strike(p, sig)
		if err != nil {
			return fmt.Errorf("bench: %s %s: %w", kind, p.node, err)
		}
		if !struck {
			ps.cfg.Log.Warn("bench: the victim exited on its own before the fault; fault skipped", "kind", kind, "node", p.node)
			return nil
		}
		if kind == FaultStop {
			ps.conts.Add(1)
			time.AfterFunc(ps.stopFor(), func() {
				defer ps.conts.Done()
				_ = p.cmd.Process.Signal(syscall.SIGCONT)
				if ps.peer != nil {
					// A woken pcgroups member process serves on (nothing
					// fences it, unlike an owner): a live process again,
					// a victim for the next faults.
					p.planned.Store(false)
				}
			})
		}
	case FaultSeize:
		if ps.peer != nil {
			// pcgroups' forced move: the victim's members step down (their
			// pins may come back to it).
			if err := ps.peer.stepDown(ctx, p.node); err != nil {
				ps.cfg.Log.Warn("bench: step-down failed", "node", p.node, "error", err)
				return nil
			}
			break
		}
		for id := range held {
			if err := ps.seize(ctx, id); err != nil {
				// A seize that fails (a stalled server) moves nothing: the
				// id is not a takeover to measure.
				ps.cfg.Log.Warn("bench: seize failed", "id", id, "error", err)
				delete(held, id)
			}
		}
		if len(held) == 0 {
			return nil
		}
	default:
		return fmt.Errorf("bench: unknown fault %q", kind)
	}
	ps.nFaults.Add(1)
	if kind != FaultSeize {
		ps.spawns.Add(1)
		go func() {
			defer ps.spawns.Done()
			if _, err := ps.spawn(ctx); err != nil && ctx.Err() == nil {
				ps.report(err)
			}
		}()
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.faults = append(ps.faults, Fault{At: at.Sub(ps.s.start).Seconds(), Kind: kind, Node: p.node, IDs: len(held), GapMs: -1})
	for id, e := range held {
		g := &gapSample{id: id, epoch: e, at: at.UnixNano(), kind: kind, fault: len(ps.faults) - 1}
		ps.gaps[id] = append(ps.gaps[id], g)
		ps.samples = append(ps.samples, g)
	}
	return nil
}

// strike marks p's end as the fault's and signals it. It is false when p
// exited on its own after it was picked (a self-fence) and exited has
// already replaced it: nothing to hit. A p that exits between the mark
// and the signal is struck (the signal finds it done): exited sees the
// mark and leaves its replacement to the fault, as for any fault.
func (ps *procSet) strike(p *proc, sig syscall.Signal) (bool, error) {
	ps.mu.Lock()
	_, alive := ps.procs[p.node]
	if alive {
		p.planned.Store(true)
	}
	ps.mu.Unlock()
	if !alive {
		return false, nil
	}
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return false, err
	}
	return true, nil
}

// stopFor is how long a stopped owner stays stopped: well past its ttl, so
// that its ids are taken over before it wakes.
func (ps *procSet) stopFor() time.Duration { return ps.cfg.TTL*3/2 + 300*time.Millisecond }

// seize force-seizes id as another node ("bench-operator") and releases
// it, so that a standby worker claims it.
func (ps *procSet) seize(ctx context.Context, id string) error {
	const node = "bench-operator"
	for try := 0; ; try++ {
		_, err := ps.w.Ownership.Seize(ctx, id, node, ps.cfg.TTL, true)
		switch {
		case err == nil:
			if err := ps.w.Ownership.Release(ctx, id, node); err != nil {
				return fmt.Errorf("bench: release after the seize of %q: %w", id, err)
			}
			return nil
		case errors.Is(err, ownership.ErrContended) && try < 10:
			continue
		case errors.Is(err, ownership.ErrFree):
			return nil // released meanwhile: nothing to seize
		default:
			return fmt.Errorf("bench: seize %q: %w", id, err)
		}
	}
}

// during injects a fault every cfg.FaultEvery while a round of d posts,
// the first after half a period, the last at least half a period before
// the posting ends (so that its ids still get mail to take over).
func (ps *procSet) during(ctx context.Context, start time.Time, d time.Duration) {
	every := ps.cfg.FaultEvery
	if slices.Equal(ps.kinds, []string{FaultNone}) {
		return
	}
	for k := 0; ; k++ {
		at := start.Add(every/2 + time.Duration(k)*every)
		if at.After(start.Add(d - every/2)) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(at)):
		}
		if err := ps.fault(ctx); err != nil {
			ps.report(err)
			return
		}
	}
}

// start starts cfg.Owners owner processes.
func (ps *procSet) start(ctx context.Context) error {
	for range ps.cfg.Owners {
		if _, err := ps.spawn(ctx); err != nil {
			return err
		}
	}
	return nil
}

// stop wakes stopped owners, stops every owner gracefully (SIGKILL after
// 15 s) and waits until their reports are read.
func (ps *procSet) stop() {
	ps.mu.Lock()
	ps.closing = true
	ps.mu.Unlock()
	ps.spawns.Wait()
	ps.conts.Wait()
	ps.mu.Lock()
	all := make([]*proc, 0, len(ps.procs))
	for _, p := range ps.procs {
		all = append(all, p)
	}
	ps.mu.Unlock()
	for _, p := range all {
		p.planned.Store(true)
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		_ = p.stdin.Close()
	}
	for _, p := range all {
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
	ps.readers.Wait()
}

// gapStats summarises the gaps per fault kind and overall (key "all"),
// and sets each fault's longest gap.
func (ps *procSet) gapStats() map[string]GapStats {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	byKind := map[string][]float64{}
	claims := map[string][]float64{}
	pending, idle := map[string][]float64{}, map[string][]float64{}
	out := map[string]GapStats{}
	claimed := func(g *gapSample) (float64, bool) {
		if ps.led == nil {
			return 0, false // the pcgroups side: no claim records
		}
		ps.led.mu.Lock()
		defer ps.led.mu.Unlock()
		for _, n := range ps.led.newer[g.id] {
			if n.epoch > g.epoch && n.at >= g.at-int64(clockTolerance) {
				if g.kind == FaultSeize && n.epoch == g.epoch+1 {
					continue // the seizing operator's own epoch
				}
				return float64(n.at-g.at) / 1e6, true
			}
		}
		return 0, false
	}
	for _, f := range ps.faults {
		for _, k := range []string{f.Kind, "all"} {
			st := out[k]
			st.Faults++
			out[k] = st
		}
	}
	for _, g := range ps.samples {
		for _, k := range []string{g.kind, "all"} {
			st := out[k]
			st.Samples++
			if g.first == 0 {
				st.Unmeasured++
			}
			out[k] = st
		}
		if g.first == 0 {
			continue
		}
		ms := float64(g.first-g.at) / 1e6
		byKind[g.kind] = append(byKind[g.kind], ms)
		byKind["all"] = append(byKind["all"], ms)
		if g.sent < g.at {
			pending[g.kind] = append(pending[g.kind], ms)
			pending["all"] = append(pending["all"], ms)
		} else {
			wait := float64(g.first-g.sent) / 1e6
			idle[g.kind] = append(idle[g.kind], wait)
			idle["all"] = append(idle["all"], wait)
		}
		if c, ok := claimed(g); ok {
			claims[g.kind] = append(claims[g.kind], c)
			claims["all"] = append(claims["all"], c)
		}
		if f := &ps.faults[g.fault]; ms > f.GapMs {
			f.GapMs = round(ms, 1)
		}
	}
	for k, v := range byKind {
		st := out[k]
		st.P50, st.P99, st.Max = quantile(v, 0.50), quantile(v, 0.99), quantile(v, 1)
		st.ClaimP50, st.ClaimP99 = quantile(claims[k], 0.50), quantile(claims[k], 0.99)
		st.PendingSamples, st.PendingP99 = len(pending[k]), quantile(pending[k], 0.99)
		st.IdleSamples, st.IdleP99 = len(idle[k]), quantile(idle[k], 0.99)
		out[k] = st
	}
	return out
}

// quantile is the nearest-rank q-quantile of v, rounded to 0.1 ms.
func quantile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.999999) - 1
	i = min(max(i, 0), len(s)-1)
	return round(s[i], 1)
}
