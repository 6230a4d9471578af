package shard

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/fencing"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/world"
)

// Config is a shard worker's settings. Zero fields take the defaults.
type Config struct {
	Node string        // the node name (required)
	TTL  time.Duration // node lease ttl; 0: the world's default
	// Parallel bounds the handler calls the worker runs at once, over all
	// its shards (default 256).
	Parallel int
	// ReadAhead bounds the messages a shard's reader hands its holder
	// before they are handled (default 4096).
	ReadAhead int
	// CommitEvery is the period of a shard's commits while it has mail
	// (default 20 ms; 200 ms with State: stateCommitEvery); RemoveEvery
	// that of its removals (default 250 ms).
	CommitEvery, RemoveEvery time.Duration
	// BackoffMin and BackoffMax bound a failed delivery's wait before the
	// next (doubling from the min; the drain package's defaults).
	BackoffMin, BackoffMax time.Duration
	// Rebalance is the period of the look at the live nodes (default a
	// third of the ttl).
	Rebalance time.Duration
	// State hands each message its id's state (drain.Message.State) and
	// commits the handler's writes with the shard's cursor (state.go).
	// The world's bucket must take atomic batches (drain.ErrNoState).
	State bool
	Log   *slog.Logger
}

// Worker serves the shards of a sharded world as one node: it holds a node
// lease, claims the shards whose first choice it is among the live nodes
// (and, after a wait, any shard left free), hands a shard over when a node
// that joined is its first choice, and delivers each held shard through a
// holder.
type Worker struct {
	w   *world.World
	own *ownership.Store
	cfg Config
	h   drain.Handler
	log *slog.Logger

	slots  chan struct{} // one per running handler call
	purges chan struct{} // one per purge in flight (maxPurges)
	// calls hands a call to an idle caller (spawn); callers counts them.
	calls   chan func()
	callers atomic.Int32
	rctx    context.Context
	// crash (tests only) ends Run as a crash would: holders stopped at
	// once, nothing committed, the node lease left to lapse.
	crash  atomic.Bool
	cancel context.CancelCauseFunc

	// states carries the state commits of the worker's shards in shared
	// atomic batches (holder.write).
	states *jsapi.BatchQueue

	mu      sync.Mutex
	held    map[int]*holder
	session *ownership.Session

	commits, removals atomic.Int64
}

// stateCommitEvery is a state worker's period of commits. A commit with
// state is an atomic batch, which a single file-backed replica stages in
// a store of its own: about 2.5-3 ms of the server's CPU each, against
// tens of µs for a cursor alone. Committing every 200 ms instead of 20
// costs a crash up to 200 ms more of handled messages to deliver again
// (the state stays exact: it is committed with the cursor), and nothing
// else: a call's answer still has its commit made at once (holder.serve),
// and a graceful stop commits before it lets go (docs/design.md 3.14).
const stateCommitEvery = 200 * time.Millisecond

// commitLinger is how long the first state commit of a tick waits in the
// worker's shared batches for the other holdings' (they tick together:
// untilTick), so that a tick's commits go out as one batch, not the first
// alone and the rest behind it.
const commitLinger = 2 * time.Millisecond

// New returns a worker of the sharded world w.
func New(w *world.World, own *ownership.Store, cfg Config, h drain.Handler) (*Worker, error) {
	if !w.Config.Sharded() {
		return nil, fmt.Errorf("shard: world %q is a per-id world: serve it with package worker", w.Name)
	}
	if err := wire.ValidateNode(cfg.Node); err != nil {
		return nil, err
	}
	if h == nil {
		return nil, fmt.Errorf("%w: shard: no handler", fencing.ErrInvalidOption)
	}
	if cfg.State && !w.AllowsState() {
		return nil, fmt.Errorf("shard: world %q: %w", w.Name, drain.ErrNoState)
	}
	if cfg.CommitEvery < 0 || cfg.RemoveEvery < 0 {
		return nil, fmt.Errorf("%w: shard: a commit or removal period below 0 (commit every %v, remove every %v): give a positive period, or 0 for the default", fencing.ErrInvalidOption, cfg.CommitEvery, cfg.RemoveEvery)
	}
	ttl, err := w.Config.TTL(cfg.TTL)
	if err != nil {
		return nil, err
	}
	cfg.TTL = ttl
	cfg.Parallel = cmp.Or(cfg.Parallel, 256)
	cfg.ReadAhead = cmp.Or(cfg.ReadAhead, 4096)
	if cfg.State {
		cfg.CommitEvery = cmp.Or(cfg.CommitEvery, stateCommitEvery)
	}
	cfg.CommitEvery = cmp.Or(cfg.CommitEvery, 20*time.Millisecond)
	cfg.RemoveEvery = cmp.Or(cfg.RemoveEvery, 250*time.Millisecond)
	cfg.BackoffMin = cmp.Or(cfg.BackoffMin, drain.DefaultBackoffMin)
	cfg.BackoffMax = cmp.Or(cfg.BackoffMax, drain.DefaultBackoffMax)
	cfg.Rebalance = cmp.Or(cfg.Rebalance, ttl/3)
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &Worker{
		w: w, own: own, cfg: cfg, h: h,
		log:    cfg.Log.With("node", cfg.Node, "world", w.Name),
		slots:  make(chan struct{}, cfg.Parallel),
		purges: make(chan struct{}, maxPurges),
		calls:  make(chan func()),
		held:   map[int]*holder{},
		states: jsapi.NewBatchQueue(handles.Of(w).JS, commitTimeout, commitLinger),
	}, nil
}

// Held lists the shards the worker holds now, in order.
func (wk *Worker) Held() []int {
	wk.mu.Lock()
	defer wk.mu.Unlock()
	out := make([]int, 0, len(wk.held))
	for q := range wk.held {
		out = append(out, q)
	}
	sort.Ints(out)
	return out
}

// Session is the worker's node lease once Run has it, else nil.
func (wk *Worker) Session() *ownership.Session {
	wk.mu.Lock()
	defer wk.mu.Unlock()
	return wk.session
}

// Stats are a worker's counts so far.
type Stats struct {
	Commits  int64 // cursors the broker accepted
	Removals int64 // purges of committed mail
}

// Stats returns the worker's counts.
func (wk *Worker) Stats() Stats {
	return Stats{Commits: wk.commits.Load(), Removals: wk.removals.Load()}
}

// handle runs the handler, turning a panic into an error.
func (wk *Worker) handle(ctx context.Context, m drain.Message) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("handler panicked: %v", p)
		}
	}()
	return wk.h(ctx, m)
}

// spawn runs f, which holds one of the worker's slots and gives it back
// when it ends, on one of the worker's callers: goroutines that run one
// handler call (or dead-letter write) after another, waiting in between. A
// call then pays neither a new goroutine's start nor its stack's growth,
// which were a tenth of the CPU of steady delivery (BenchmarkShardSteady).
//
// There are at most Parallel callers: with that many, the slot f holds
// leaves at most Parallel-1 calls running, so a caller is idle or about to
// be, and the send waits for it only that long.
func (wk *Worker) spawn(f func()) {
	select {
	case wk.calls <- f:
		return
	default:
	}
	if int(wk.callers.Add(1)) > wk.cfg.Parallel {
		wk.callers.Add(-1)
		select {
		case wk.calls <- f:
		case <-wk.rctx.Done():
			go f() // the callers end with the run: none may take it
		}
		return
	}
	go wk.caller(f)
}

// caller runs f, then every call handed to it, until the worker's run ends.
func (wk *Worker) caller(f func()) {
	defer wk.callers.Add(-1)
	for {
		f()
		select {
		case f = <-wk.calls:
		case <-wk.rctx.Done():
			return
		}
	}
}

func (wk *Worker) backoff(delivery int) time.Duration {
	b := wk.cfg.BackoffMin
	for i := 1; i < delivery && b < wk.cfg.BackoffMax; i++ {
		b *= 2
	}
	return min(b, wk.cfg.BackoffMax)
}

// Run serves until ctx ends or the node lease self-fences. It waits for
// the node lease at start. When ctx ends every holder commits what it
// handled and the node lease is released (every shard free at once), and
// Run returns nil; on a self-fence it stops every holder and returns the
// fencing.Cause.
func (wk *Worker) Run(ctx context.Context) error {
	ss, err := wk.own.AcquireSession(ctx, wk.cfg.Node, wk.cfg.TTL)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	wk.mu.Lock()
	wk.session = ss
	wk.mu.Unlock()
	wk.log.Info("node lease acquired", "event", "lease_acquired", "epoch", ss.Epoch(), "ttl", wk.cfg.TTL, "shards", wk.w.Config.Shards)

	// Requests are bounded one by one (jsapi's timeout), not by ctx; the
	// end of ctx or of the session stops everything.
	rctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancel(nil)
	stopOnFence := context.AfterFunc(ss.Context(), func() { cancel(context.Cause(ss.Context())) })
	defer stopOnFence()
	wk.mu.Lock()
	wk.rctx, wk.cancel = rctx, cancel
	wk.mu.Unlock()

	a := newAssigner(wk, ss)
	err = a.run(ctx, rctx)
	if wk.crash.Load() {
		wk.stopAll(false)
		return ss.Orphan()
	}

	// Stop: holders drain (commit what they handled) unless fenced.
	wk.stopAll(ss.Cause() == "")
	cancel(err)
	if cause := ss.End(wk.log, "shards"); cause != nil {
		return cause
	}
	if err != nil && ctx.Err() == nil {
		return err
	}
	return nil
}

// stopAll ends every holder: gracefully (drain) or at once.
func (wk *Worker) stopAll(graceful bool) {
	wk.mu.Lock()
	hs := make([]*holder, 0, len(wk.held))
	for _, h := range wk.held {
		hs = append(hs, h)
	}
	wk.mu.Unlock()
	for _, h := range hs {
		if graceful {
			h.stopDraining()
		} else {
			h.cancel(errStopped)
		}
	}
	for _, h := range hs {
		<-h.ended
	}
}

var errStopped = errors.New("shard: the worker stopped")

// stopDraining asks the holder to hand out nothing more, commit and end.
func (h *holder) stopDraining() {
	h.drainOnce.Do(func() { close(h.drainReq) })
}
