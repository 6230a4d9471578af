// Package worker runs a node that serves mailboxes: it holds a node lease
// (ownership.Session), claims every id that has mail and no owner, drains
// the ids it holds, and self-fences with its session.
//
// N workers on one world share it: an id with mail and no owner is claimed
// by the first worker to try (a conditional write: exactly one wins), and a
// worker that holds more ids waits longer before it tries, so load spreads.
// No id is drained by two workers at once: ownership is exclusive, a drain
// takes the id's drain lock, and every commit is fenced on the ownership
// record. When a worker dies, its node lease lapses after its ttl and all
// of its ids are free at once; the others see the lapse on their ownership
// watch and take them over.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/fencing"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/shard"
	"github.com/fencepost/fencepost/world"
)

// Config is a worker's settings. Zero fields take the documented defaults.
type Config struct {
	Node string        // the node name (required)
	TTL  time.Duration // node lease ttl; 0: the world's default
	// IDs restricts the worker to these ids; empty: every id of the world.
	IDs []string
	// Scan is the period of the backstop for missed notifications: a full
	// scan for ids with mail, made at the start, in the period after a
	// candidate was dropped or the posts' consumer failed, and every 6
	// periods in any case. Default: the ttl.
	Scan time.Duration
	// Idle releases an id whose mailbox stayed empty this long, so that
	// load can move. Default: 30 s.
	Idle time.Duration
	// Spread is the claim delay per id already held: a worker holding k ids
	// waits k*Spread (at most MaxSpread) before it claims another. Default
	// 1 ms, MaxSpread 100 ms.
	Spread, MaxSpread time.Duration
	// Parallel bounds the deliveries this worker runs at once (default
	// 128), and its claims (at most 32):
	// beyond it, an id with mail waits for a slot. Without a bound a worker
	// holding thousands of ids sends thousands of requests at once, and its
	// node lease renewal queues behind them (it self-fenced under the
	// fan-in bench).
	Parallel int
	Log      *slog.Logger
	// Metrics is told of the worker's drains (nil: nobody; *metrics.Set
	// records them for Prometheus); the ownership store's counts come from
	// client.WithMetrics.
	Metrics drain.Observer
	// DrainOptions are added to the worker's drainer options (the fault
	// tests observe commits with drain.WithCommitObserver).
	DrainOptions []drain.Option
	// State hands each message its id's state (drain.Message.State) and
	// commits the handler's writes with the message (drain.HoldState;
	// client.World.NewStateWorker sets it). The world's bucket must take
	// atomic batches (drain.ErrNoState).
	State bool
	// CommitEvery is, on a sharded world, the period of a held shard's
	// commits while it has mail: 20 ms by default, 200 ms with State (a
	// commit with state is an atomic batch, which costs the server about
	// 3 ms). Longer: fewer commits; a crash hands out again up to one
	// period of handled messages (state stays exact: it is committed
	// with the cursor), and committed mail waits longer for removal.
	// Per-id worlds commit as deliveries end and ignore it.
	CommitEvery time.Duration
}

// Worker serves the mailboxes of one world as one node.
type Worker struct {
	w   *world.World
	own *ownership.Store
	cfg Config
	h   drain.Handler
	log *slog.Logger
	ids map[string]bool // cfg.IDs as a set; nil: all
	dr  *drain.Drainer
	// sweep removes the committed messages of every id with one purge a
	// second (drain.Sweeper), fed by the worker's consumer; nil when the
	// worker reads only some ids (cfg.IDs) or the server purges.
	sweep *drain.Sweeper
	// parts: the feed of a worker of every id of a partitioned world
	// (parts.go); nil: one consumer of every post (feed.go).
	parts *parts

	slots      chan struct{} // one per running drain (cfg.Parallel)
	claimSlots int           // claims run at once (cfg.Parallel, at most maxClaims)
	// endSlots: one per held id ending while the worker stops (its last
	// commit and its release, serve): a worker holding 100,000 ids sends
	// at most stopWrites of them at once, not all.
	endSlots chan struct{}
	// endMax: the most ids seen ending at once (tests).
	endNow, endMax atomic.Int64

	// kept: the messages of ids nobody holds here (kept.go); guarded by mu.
	kept *kept
	// peers: the world's live nodes as last listed (sorted), for the
	// order in which workers try a new id (claimWait); nil until listed.
	peers atomic.Pointer[[]string]
	// missed: a candidate was dropped (or the posts' consumer failed)
	// since the last scan; the next period scans (feed.go).
	missed atomic.Bool
	// scans, scansAfterMiss: scans made, and those a miss asked for;
	// scansDone: scans that ended (what they offered is offered).
	scans, scansAfterMiss, scansDone atomic.Int64
	// scanPurges: purges of committed messages a scan found (committed.go).
	scanPurges atomic.Int64
	// parkAfter: a held id's goroutine parks after this long with nothing
	// to do (defaultParkAfter; tests set it); serving counts the
	// goroutines running (park.go).
	parkAfter time.Duration
	serving   atomic.Int64
	// drainRuns counts the deliveries that drained from the cursor rather
	// than hand out an inbox (serve's deliver; tests).
	drainRuns atomic.Int64
	// feedFault (tests only) fails feed's setup when it returns an error.
	feedFault func() error
	// dropRepublished (tests only) drops the republished posts it says
	// true of (parts.go).
	dropRepublished func(seq uint64) bool
	// onEvent (tests only) sees each ownership event before the worker
	// acts on it, and may hold it back: a watch that lags, which the
	// server cannot be made to do on demand.
	onEvent func(ownership.Event)
	// claimWaitFor (tests only), when it returns more than zero, is the
	// wait before a claim of id (claimWait): a worker whose claims queue.
	claimWaitFor func(id string) time.Duration
	// onCandidate (tests only) sees each candidate after dispatch handled
	// it (free: the watch reported it free); onClaimed each claim's end
	// before dispatch learns of it, and may hold it back.
	onCandidate func(id string, free bool)
	onClaimed   func(id string, heldByOther bool)
	// cand: the candidates of the running worker (Run).
	cand chan candidate

	mu      sync.Mutex
	held    map[string]*holding
	session *ownership.Session

	// sh serves a sharded world in this worker's place (package shard).
	sh *shard.Worker
	// hinted: the shard hint was logged (order.go).
	hinted atomic.Bool
}

type holding struct {
	lease  *ownership.Lease
	drains *drain.Holding // drains without a lock (drain.Hold)
	more   chan struct{}  // capacity 1: "there may be new mail"
	// inbox: the id's messages from the worker's one consumer of every
	// mailbox, in stream order, handed out with drains.Deliver. One that
	// finds inbox full is dropped, and dropped becomes at least its
	// sequence: the next delivery is a drain (from the cursor), which
	// covers it, unless the holding already handed it out (a drain that
	// ran meanwhile read it: drain.Holding.Covers). dropped is
	// gapUnknown when the feed may have lost messages it cannot name (a
	// reconnect, a reset consumer); 0: nothing dropped. nil inbox while
	// parked (mu).
	inbox   chan *jetstream.RawStreamMsg
	dropped atomic.Uint64
	full    atomic.Bool // the inbox overflowed: serve grows it

	// start: the id's messages the worker kept while nobody held it, all
	// of them (kept.take): the first delivery hands them out without
	// reading the mailbox (drain.Holding.Start). Used once, by serve.
	start    []*jetstream.RawStreamMsg
	whole    bool
	lastDone atomic.Int64 // unix nanos of the end of the last drain
	// active: unix nanos of the last delivery (or the claim); the id is
	// released when idle for Config.Idle after it.
	active atomic.Int64
	// lost ends the holding's context (its drain and running handler)
	// when the watch shows the id taken by another holding.
	lost context.CancelCauseFunc

	// A holding's goroutine (serve) runs while the id has work and parks
	// (ends) after parkAfter without any; mail, a nudge, the idle release
	// falling due or the end of the holding's context wake it (park.go).
	// spawn starts it; mu guards parked, idleWake, inbox and gone.
	spawn    func()
	mu       sync.Mutex
	parked   bool
	idleWake *time.Timer // wakes a parked holding when its idle release is due
	// gone: the holding ended (serve left it for good, after the id left
	// the worker's map): post takes nothing more, its caller proposes the
	// id instead.
	gone bool
}

// stopWrites bounds the held ids whose last commit and release a stopping
// worker sends at once (Worker.endSlots).
const stopWrites = 64

// errTakenOver is the cause given to a holding whose id another holding
// took (a seize, forced or after a lapse the worker missed).
var errTakenOver = errors.New("worker: the id was taken over")

// candidate is an id that may need this worker: it got mail (post), its
// holder went away (free), or the scan found mail in it (scan).
type candidate struct {
	id  string
	why source
}

type source int

const (
	fromPost source = iota
	fromFree
	fromScan
	fromTaken // another node claimed or seized it: not a candidate, a note
)

// New returns a worker for world w, holding ids through own, running
// handler h for every message. Most programs call client.World.NewWorker,
// which passes both.
func New(w *world.World, own *ownership.Store, cfg Config, h drain.Handler) (*Worker, error) {
	if err := wire.ValidateNode(cfg.Node); err != nil {
		return nil, err
	}
	if cfg.CommitEvery < 0 {
		return nil, fmt.Errorf("%w: worker: CommitEvery %v is below 0: give a positive period, or 0 for the default", fencing.ErrInvalidOption, cfg.CommitEvery)
	}
	if w.Config.Sharded() {
		return newSharded(w, own, cfg, h)
	}
	if cfg.State && !w.AllowsState() {
		return nil, fmt.Errorf("worker: world %q: %w", w.Name, drain.ErrNoState)
	}
	ttl, err := w.Config.TTL(cfg.TTL)
	if err != nil {
		return nil, err
	}
	cfg.TTL = ttl
	if cfg.Scan <= 0 {
		cfg.Scan = ttl
	}
	if cfg.Idle <= 0 {
		cfg.Idle = 30 * time.Second
	}
	if cfg.Spread <= 0 {
		cfg.Spread = time.Millisecond
	}
	if cfg.MaxSpread <= 0 {
		cfg.MaxSpread = 100 * time.Millisecond
	}
	if cfg.Parallel <= 0 {
		cfg.Parallel = 128
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	// The drain lock's term is the ttl, not the 30 s default: a drain of
	// this worker whose lock outlives the worker (it died mid-drain) blocks
	// other drains of the same epoch that long. A new holder (a newer
	// epoch) takes such a lock over at once (docs/design.md 3.5).
	dopts := append([]drain.Option{drain.WithLockTTL(ttl), drain.WithLogger(cfg.Log), drain.WithMetrics(cfg.Metrics)}, cfg.DrainOptions...)
	dr, err := drain.New(w, own, dopts...)
	if err != nil {
		return nil, err
	}
	wk := &Worker{w: w, own: own, cfg: cfg, slots: make(chan struct{}, cfg.Parallel), endSlots: make(chan struct{}, stopWrites), claimSlots: min(cfg.Parallel, maxClaims), h: h, dr: dr, log: cfg.Log.With("node", cfg.Node), held: map[string]*holding{}, parkAfter: defaultParkAfter}
	if len(cfg.IDs) > 0 {
		wk.ids = map[string]bool{}
		for _, id := range cfg.IDs {
			if err := wire.ValidateID(id); err != nil {
				return nil, err
			}
			wk.ids[id] = true
		}
	}
	switch {
	case w.Config.Partitions > 0 && len(wk.ids) <= maxListed:
		// Nothing here reads every post: no sweep, and each id purges
		// its own (docs/design/partitions.md). A worker of a list subscribes to its ids'
		// posts (wk.ids; nil: the partitions it serves).
		wk.parts = newParts(w.Name, w.Config.Partitions, wk.ids)
	case len(cfg.IDs) == 0 && w.Config.Purge != world.PurgeByServer:
		wk.sweep = dr.NewSweeper()
	}
	// Keeping needs a consumer that reads from the first message (the
	// one a sweep needs too), or posts that name their predecessors.
	wk.kept = newKept(wk.sweep != nil)
	if wk.parts != nil {
		wk.kept = newChainedKept()
	}
	return wk, nil
}

// newSharded is the worker of a sharded world: package shard serves it,
// one node lease and the shards assigned to the node.
func newSharded(w *world.World, own *ownership.Store, cfg Config, h drain.Handler) (*Worker, error) {
	if len(cfg.IDs) > 0 {
		return nil, fmt.Errorf("%w: worker: world %q is sharded: its workers serve shards, not a list of ids (leave IDs empty)", fencing.ErrInvalidOption, w.Name)
	}
	sw, err := shard.New(w, own, shard.Config{Node: cfg.Node, TTL: cfg.TTL, Parallel: cfg.Parallel, State: cfg.State, CommitEvery: cfg.CommitEvery, Log: cfg.Log}, h)
	if err != nil {
		return nil, err
	}
	return &Worker{w: w, own: own, cfg: cfg, h: h, log: cfg.Log, sh: sw}, nil
}

// Shards is the worker of a sharded world, else nil.
func (wk *Worker) Shards() *shard.Worker { return wk.sh }

// Held lists the ids the worker holds now; on a sharded world, the units
// of the shards it holds (wire.ShardUnit).
func (wk *Worker) Held() []string {
	if wk.sh != nil {
		var out []string
		for _, q := range wk.sh.Held() {
			out = append(out, wire.ShardUnit(q))
		}
		return out
	}
	wk.mu.Lock()
	defer wk.mu.Unlock()
	out := make([]string, 0, len(wk.held))
	for id := range wk.held {
		out = append(out, id)
	}
	return out
}

// Session is the worker's node lease once Run has it, else nil.
func (wk *Worker) Session() *ownership.Session {
	if wk.sh != nil {
		return wk.sh.Session()
	}
	wk.mu.Lock()
	defer wk.mu.Unlock()
	return wk.session
}

// Run serves until ctx ends or the node lease self-fences. It waits for
// the node lease at start (a previous process of the node may still hold
// it). When ctx ends it stops every drain and releases the node lease, so
// that every id it held is free at once, and returns nil. On a self-fence
// it stops every drain and returns the fencing.Cause.
func (wk *Worker) Run(ctx context.Context) error {
	if wk.sh != nil {
		return wk.sh.Run(ctx)
	}
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
	wk.log.Info("node lease acquired", "event", "lease_acquired", "epoch", ss.Epoch(), "ttl", wk.cfg.TTL)

	// The worker's requests are bounded one by one (the client's timeout
	// applies to a context without a deadline), not by a deadline of ctx,
	// which may be hours away: a request whose answer was lost (a cluster
	// member stopped under it) held its id that long. The end of ctx still
	// stops everything.
	rctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancel(nil)
	stopOnEnd := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
	defer stopOnEnd()
	stopOnFence := context.AfterFunc(ss.Context(), func() { cancel(context.Cause(ss.Context())) })
	defer stopOnFence()

	var wg sync.WaitGroup
	// Room for a world's worth of new ids at once: a candidate that finds
	// it full is dropped (the scan finds it again), and a dropped note of
	// another node's claim made this worker race that node for the id.
	cand := make(chan candidate, 1<<16)
	wk.cand = cand
	err = wk.startFeed(rctx, &wg, cand)
	if err == nil {
		wk.dispatch(rctx, &wg, ss, cand)
	}
	cancel(err)
	wg.Wait()

	if cause := ss.End(wk.log, "ids"); cause != nil {
		return cause
	}
	if err != nil && ctx.Err() == nil {
		return err
	}
	return nil
}

func (wk *Worker) holding(id string) *holding {
	wk.mu.Lock()
	defer wk.mu.Unlock()
	return wk.held[id]
}

func (wk *Worker) count() int {
	wk.mu.Lock()
	defer wk.mu.Unlock()
	return len(wk.held)
}
