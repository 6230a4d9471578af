package drain

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/fencing"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/world"
)

// Message is one delivery of a mailbox message to a handler.
type Message struct {
	ID       string      // the id whose mailbox it is
	Seq      uint64      // its sequence in the world's mailbox stream
	From     string      // the sender (header Fencepost-From), may be empty
	Body     []byte      // the payload
	Headers  nats.Header // the sender's own headers (no Nats-/Fencepost- ones)
	Posted   time.Time   // when the stream stored it (the stream leader's clock)
	Delivery int         // 1 for the first delivery, counted across drains and owners
	// Redelivered: the message may have been handed to a handler before.
	// It errs one way only: true may be a first delivery, false never is
	// a second one (short of a seized holder's stale delivery after the
	// seize: docs/reliability.md). True when Delivery > 1; when this
	// holding handed it out before (a commit of unknown outcome, read
	// again); when it was stored before this holder took the id from an
	// earlier one whose lease lapsed or was seized (ownership.Lease.
	// PriorUntil); when it was stored before this drain took over a drain
	// lock left behind (a crashed drain, an interrupted handler); and,
	// for Drain by (node, epoch) at an epoch above 1, when it was stored
	// before the drain began (how the epoch was won is not known there).
	// Delivery counts only deliveries known to have failed, so it can be
	// 1 here.
	Redelivered bool
	Fence       fencing.Fence
	// State is the id's state, for a drain run with state (WithState,
	// HoldState, worker.Config.State; see State); nil otherwise.
	State *State
	// call: where the handler's answer goes, when the message is a call
	// (Reply, IsCall; call.go); nil otherwise.
	call *callSlot
}

// Handler processes one message. Returning nil acknowledges it; an error
// leaves it for redelivery (with backoff), and after the world's
// MaxDeliveries moves it to the dead letters. The context ends when the
// drain must stop (its lock was lost, or the caller cancelled).
type Handler func(ctx context.Context, m Message) error

// Result is the outcome of a drain that ran: done(count).
type Result struct {
	Count        int    // messages that left the mailbox: Acked + DeadLettered
	Acked        int    // acknowledged by the handler
	DeadLettered int    // moved to dead letters
	Deliveries   int    // handler calls, failed ones included
	Cursor       uint64 // the committed cursor at the end
}

// Drainer drains the mailboxes of one world. It is safe for concurrent use:
// drains of different ids run in parallel, a second drain of one id gets
// ErrContended.
type Drainer struct {
	world string
	cfg   world.Config
	js    jetstream.JetStream
	nc    *nats.Conn
	w     *world.World
	own   *ownership.Store

	batch   int
	lockTTL time.Duration
	// commitEvery, commitInterval: commits within a batch (WithCommitEvery).
	commitEvery    int
	commitInterval time.Duration
	// sweeper, once NewSweeper made one: the holdings' purges are its.
	sweeper    atomic.Pointer[Sweeper]
	backoffMin time.Duration
	backoffMax time.Duration
	skew       time.Duration
	log        *slog.Logger
	metrics    Observer

	// beforeCommit, when set (tests only), runs after a batch was handled
	// and before its fenced cursor write.
	beforeCommit func(id string, c wire.Cursor)
	// noRenew (tests only) makes every lock renewal fail unsent: the drain
	// behaves like a paused or cut-off process whose lock lapses (its
	// Term's watchdog stops it at the lock's deadline).
	noRenew bool
	// onCommit, when set, observes every stored commit.
	onCommit func(Commit)
	// states: the state holdings' commits, in shared batches (state.go,
	// publishCommitAsync).
	states *jsapi.BatchQueue
	// cursors: the drains' cursor reads on a single replica, in shared
	// batches (cursors.go).
	cursors *jsapi.LastReads
	// maxAnswer: the largest answer to a call the connection sends
	// (call.go).
	maxAnswer int
}

// New returns the drainer of an open world, using its ownership store.
func New(w *world.World, own *ownership.Store, opts ...Option) (*Drainer, error) {
	d := &Drainer{
		world: w.Name, cfg: w.Config, js: handles.Of(w).JS, nc: handles.Of(w).JS.Conn(), w: w, own: own,
		batch: DefaultBatch, lockTTL: DefaultLockTTL,
		commitEvery: DefaultCommitEvery, commitInterval: DefaultCommitInterval,
		backoffMin: DefaultBackoffMin, backoffMax: DefaultBackoffMax,
		skew: ownership.DefaultMaxSkew, log: slog.Default(), metrics: nopObserver{},
	}
	d.cursors = jsapi.NewLastReads(d.nc, wire.BucketStream(d.world))
	d.states = jsapi.NewBatchQueue(d.js, holdingCommitWait, 0)
	d.maxAnswer = maxAnswer(d.nc)
	for _, o := range opts {
		if err := o(d); err != nil {
			return nil, err
		}
	}
	if m := w.Config.MaxTTL; m > 0 && d.lockTTL > m {
		// A drain lock's term is at most the world's max ttl, as a lease's
		// is: readers take a longer one for a forgery (maxLockTerm).
		d.lockTTL = m
	}
	return d, nil
}

// maxLockTerm is how far beyond a reader's clock an honest drain lock may
// expire: the world's max ttl (the longest term a drainer gives its lock)
// plus ownership.MaxTermSlack. A lock beyond it was written by no drain
// (an owner writing the bucket directly, docs/security.md): it is taken
// over like a lapsed one. 0: not bounded.
func (d *Drainer) maxLockTerm() time.Duration {
	if d.cfg.MaxTTL <= 0 {
		return 0
	}
	return d.cfg.MaxTTL + ownership.MaxTermSlack
}

// Drain delivers id's mailbox to h as node at epoch and returns done(count)
// once the mailbox is empty (or WithMax was reached). When (node, epoch) is
// not the live holder of id it returns *ownership.HeldError (another node
// holds it), *ownership.FreeError (no live lease) or *ownership.FencedError
// (the node's epoch is not the current one) and consumes nothing; the same
// errors end a drain whose holding is lost midway, after the last commit
// the broker accepted. *ContendedError (ErrContended) when another drain of
// id runs; *UnknownError (ErrUnknown) when a commit's outcome is unknown.
func (d *Drainer) Drain(ctx context.Context, id, node string, epoch uint64, h Handler, opts ...RunOption) (res Result, err error) {
	if err := wire.ValidateID(id); err != nil {
		return Result{}, err
	}
	if err := wire.ValidateNode(node); err != nil {
		return Result{}, err
	}
	a := &authority{id: id, node: node, epoch: epoch, ttl: d.cfg.DefaultTTL}
	if epoch > 1 {
		// How epoch was won is not known here (DrainLease knows): an
		// earlier holder may have handed out what was stored before now.
		a.seenBefore(time.Now().Add(d.skew))
	}
	defer d.observe(time.Now(), &res)
	res, err = d.drain(ctx, a, h, opts)
	return res, err
}

// observe records a drain call that started at start in the metrics.
func (d *Drainer) observe(start time.Time, res *Result) {
	d.metrics.Drained(d.world, time.Since(start))
	d.metrics.DeadLettered(d.world, res.DeadLettered)
}

// DrainLease is Drain with the lease of a claim, seize or renewal: the
// lease's local validity (ValidUntil) bounds how long the drain may act
// without reading the record again.
func (d *Drainer) DrainLease(ctx context.Context, l *ownership.Lease, h Handler, opts ...RunOption) (res Result, err error) {
	a := &authority{id: l.ID, node: l.Node, epoch: l.Epoch, ttl: l.TTL, until: l.ValidUntil(), priorUntil: l.PriorUntil}
	defer d.observe(time.Now(), &res)
	res, err = d.drain(ctx, a, h, opts)
	return res, err
}

// authority is what a drain knows of its holding: the fence it writes with
// and the local instant after which it must read the record again before
// acting.
type authority struct {
	id    string
	node  string
	epoch uint64
	ttl   time.Duration
	fence fencing.Fence
	until time.Time // local, monotonic
	// backed: held through a node lease session (only a Holding drains it).
	backed bool
	// lease, for a Holding's drain: its validity is the session's, which
	// moves on with every node lease renewal.
	lease *ownership.Lease
	// priorUntil: messages stored until then may have been handed out by
	// an earlier holder (ownership.Lease.PriorUntil); zero: none.
	priorUntil time.Time
}

// seenBefore widens priorUntil to t: messages stored until t may have
// been handed out before.
func (a *authority) seenBefore(t time.Time) {
	if t.After(a.priorUntil) {
		a.priorUntil = t
	}
}

func (a *authority) valid() bool {
	if a.lease != nil {
		return a.lease.Valid()
	}
	return time.Now().Before(a.until)
}

// authorize asks ownership whether a.node at a.epoch may act on a.id
// (ownership.Store.Authorize: the record, its liveness and the clock
// arithmetic are ownership's); it refreshes the fence's revision and, if
// later, the local deadline.
func (d *Drainer) authorize(ctx context.Context, a *authority) error {
	au, err := d.own.Authorize(ctx, a.id, a.node, a.epoch)
	return a.take(au, err)
}

// take keeps a new authority from ownership.
func (a *authority) take(au ownership.Authority, err error) error {
	if err != nil {
		return err
	}
	a.fence, a.backed = au.Fence, au.Backed
	if au.Until.After(a.until) {
		a.until = au.Until
	}
	return nil
}
