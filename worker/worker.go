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
	"hash/fnv"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/fencing"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/world"
)

// Config is a worker's settings. Zero fields take the documented defaults.
type Config struct {
	Node string        // the node name (required)
	TTL  time.Duration // node lease ttl; 0: the world's default
	// IDs restricts the worker to these ids; empty: every id of the world.
	IDs []string
	// Scan is the period of a full scan for ids with mail, a backstop for
	// missed notifications. Default: the ttl.
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

	slots  chan struct{} // one per running drain (cfg.Parallel)
	claims chan struct{} // one per running claim (cfg.Parallel)

	// kept: the messages of ids nobody holds here (kept.go); guarded by mu.
	kept *kept
	// peers: the world's live nodes as last listed (sorted), for the
	// order in which workers try a new id (claimWait); nil until listed.
	peers atomic.Pointer[[]string]

	mu      sync.Mutex
	held    map[string]*holding
	session *ownership.Session
}

type holding struct {
	lease  *ownership.Lease
	drains *drain.Holding // drains without a lock (drain.Hold)
	more   chan struct{}  // capacity 1: "there may be new mail"
	// inbox: the id's messages from the worker's one consumer of every
	// mailbox, in stream order, handed out with drains.Deliver. One that
	// finds inbox full is dropped and sets gap: the next delivery is a
	// drain (from the cursor), which covers it.
	inbox chan *jetstream.RawStreamMsg
	gap   atomic.Bool
	// start: the id's messages the worker kept while nobody held it, all
	// of them (kept.take): the first delivery hands them out without
	// reading the mailbox (drain.Holding.Start). Used once, by serve.
	start    []*jetstream.RawStreamMsg
	whole    bool
	lastDone atomic.Int64 // unix nanos of the end of the last drain
	// lost ends the holding's context (its drain and running handler)
	// when the watch shows the id taken by another holding.
	lost context.CancelCauseFunc
}

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
	wk := &Worker{w: w, own: own, cfg: cfg, slots: make(chan struct{}, cfg.Parallel), claims: make(chan struct{}, min(cfg.Parallel, maxClaims)), h: h, dr: dr, log: cfg.Log.With("node", cfg.Node), held: map[string]*holding{}}
	if len(cfg.IDs) == 0 && w.Config.Purge != world.PurgeByServer {
		wk.sweep = dr.NewSweeper()
	}
	// Keeping needs a consumer that reads from the first message: the
	// one a sweep needs too.
	wk.kept = newKept(wk.sweep != nil)
	if len(cfg.IDs) > 0 {
		wk.ids = map[string]bool{}
		for _, id := range cfg.IDs {
			if err := wire.ValidateID(id); err != nil {
				return nil, err
			}
			wk.ids[id] = true
		}
	}
	return wk, nil
}

// Held lists the ids the worker holds now.
func (wk *Worker) Held() []string {
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

	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stopOnFence := context.AfterFunc(ss.Context(), func() { cancel(context.Cause(ss.Context())) })
	defer stopOnFence()

	var wg sync.WaitGroup
	// Room for a world's worth of new ids at once: a candidate that finds
	// it full is dropped (the scan finds it again), and a dropped note of
	// another node's claim made this worker race that node for the id.
	cand := make(chan candidate, 1<<16)
	err = wk.feed(rctx, &wg, cand)
	if err == nil {
		wk.dispatch(rctx, &wg, ss, cand)
	}
	cancel(err)
	wg.Wait()

	if c := ss.Cause(); c != "" {
		return c
	}
	ectx, ecancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer ecancel()
	if eerr := ss.CloseContext(ectx); eerr != nil && !errors.Is(eerr, ownership.ErrClosed) {
		if c, ok := eerr.(fencing.Cause); ok {
			return c
		}
		wk.log.Warn("releasing the node lease", "error", eerr)
	} else if eerr == nil {
		wk.log.Info("node lease released: its ids are free", "event", "lease_released", "epoch", ss.Epoch())
	}
	if err != nil && ctx.Err() == nil {
		return err
	}
	return nil
}

// offer queues a candidate id, dropping it when the queue is full (the
// periodic scan finds it again).
func offer[T any](cand chan<- T, c T) {
	select {
	case cand <- c:
	default:
	}
}

// maxClaims bounds the claims a worker runs at once: each is a write to
// the bucket stream, where the node lease's renewals queue behind them
// (with 256 at once, workers facing 1,000 new ids self-fenced under -race
// on a loaded machine).
const maxClaims = 32

// inboxSize is how many messages a held id's inbox holds (see holding).
const inboxSize = 256

// feed starts the three sources of candidate ids: posts to mailboxes (an
// ordered consumer of the mailbox subjects, new messages only: one per
// worker, not per id; a held id's messages go to its inbox, another id's
// make it a candidate), ownership changes (a lapse or release makes an id
// claimable) and a periodic scan of the mailbox stream (the backstop).
func (wk *Worker) feed(ctx context.Context, wg *sync.WaitGroup, cand chan<- candidate) error {
	filter := []string{wire.MailboxFilter(wk.w.Name)}
	if wk.ids != nil && len(wk.ids) <= 64 {
		filter = filter[:0]
		for id := range wk.ids {
			filter = append(filter, wire.MailboxSubject(wk.w.Name, id))
		}
	}
	// With a sweep the consumer reads every message from the first on
	// (the sweep must see each); without, new messages only.
	deliver := jetstream.DeliverNewPolicy
	if wk.sweep != nil {
		deliver = jetstream.DeliverAllPolicy
	}
	cons, err := wk.w.Mailbox.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: filter, DeliverPolicy: deliver,
	})
	if err != nil {
		return fmt.Errorf("worker: follow posts: %w", err)
	}
	posts, err := cons.Consume(func(m jetstream.Msg) {
		meta, err := m.Metadata()
		if err != nil {
			wk.log.Warn("follow posts: a message without metadata", "subject", m.Subject(), "error", err)
			wk.gapAll()
			return
		}
		if wk.sweep != nil {
			wk.sweep.Saw(meta.Sequence.Stream, m.Subject())
		}
		id, err := wire.MailboxID(wk.w.Name, m.Subject())
		if err != nil || !wk.wants(id) {
			return
		}
		sm := &jetstream.RawStreamMsg{Subject: m.Subject(), Sequence: meta.Sequence.Stream, Header: m.Headers(), Data: m.Data(), Time: meta.Timestamp}
		wk.mu.Lock()
		h := wk.held[id]
		if h == nil {
			wk.kept.add(id, sm)
		}
		wk.mu.Unlock()
		if h != nil {
			h.post(sm)
			return
		}
		offer(cand, candidate{id, fromPost})
	}, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		// The consumer may have missed messages while it failed: every
		// held id drains from its cursor before it takes its inbox again.
		wk.log.Debug("follow posts", "error", err)
		wk.gapAll()
	}))
	if err != nil {
		return fmt.Errorf("worker: follow posts: %w", err)
	}
	events, err := wk.own.Watch(ctx, "")
	if err != nil {
		posts.Stop()
		return fmt.Errorf("worker: watch ownership: %w", err)
	}
	if wk.sweep != nil {
		wg.Go(func() {
			if err := wk.sweep.Run(ctx, time.Second); err != nil {
				wk.log.Warn("the sweep of committed messages stopped; each id purges its own", "error", err)
			}
		})
	}
	wg.Add(2)
	go func() {
		defer wg.Done()
		defer posts.Stop()
		for ev := range events {
			if h := wk.holding(ev.ID); h != nil && h.lost != nil && ev.Epoch > h.lease.Epoch {
				// A newer epoch is on the record: stop this holding's
				// drain and handler now, not at its next commit.
				h.lost(fmt.Errorf("%w: %s by node %q at epoch %d", errTakenOver, ev.Kind, ev.Node, ev.Epoch))
			}
			switch ev.Kind {
			case ownership.EventLapsed, ownership.EventReleased, ownership.EventDeleted:
				if ev.Kind == ownership.EventLapsed && ev.NodeLease != 0 {
					wk.dropPeer(ev.Node) // its node lease lapsed: it is gone
				}
				if wk.wants(ev.ID) {
					offer(cand, candidate{ev.ID, fromFree})
				}
			case ownership.EventClaimed, ownership.EventSeized:
				if ev.Node != wk.cfg.Node && wk.wants(ev.ID) {
					offer(cand, candidate{ev.ID, fromTaken})
				}
			}
		}
	}()
	wg.Go(func() {
		// Often: a node that starts is a new id's first choice for every
		// worker only once they all listed it.
		t := time.NewTicker(min(max(wk.cfg.TTL/4, 100*time.Millisecond), 500*time.Millisecond))
		defer t.Stop()
		for {
			wk.listPeers(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
	go func() {
		defer wg.Done()
		t := time.NewTicker(wk.cfg.Scan)
		defer t.Stop()
		for {
			wk.scan(ctx, cand)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return nil
}

func (wk *Worker) wants(id string) bool { return wk.ids == nil || wk.ids[id] }

// scan offers every id whose mailbox holds messages.
func (wk *Worker) scan(ctx context.Context, cand chan<- candidate) {
	info, err := wk.w.Mailbox.Info(ctx, jetstream.WithSubjectFilter(wire.MailboxFilter(wk.w.Name)))
	if err != nil {
		if ctx.Err() == nil {
			wk.log.Warn("scan of the mailboxes failed", "error", err)
		}
		return
	}
	for subj, n := range info.State.Subjects {
		if n == 0 {
			continue
		}
		if id, err := wire.MailboxID(wk.w.Name, subj); err == nil && wk.wants(id) {
			offer(cand, candidate{id, fromScan})
		}
	}
}

// dispatch handles candidates until ctx ends: a held id gets a nudge to
// drain again; another id is claimed after a delay that grows with the
// number of ids this worker holds (load spreading).
func (wk *Worker) dispatch(ctx context.Context, wg *sync.WaitGroup, ss *ownership.Session, cand chan candidate) {
	pending := map[string]bool{} // claims scheduled or running
	// others: ids another worker was seen holding, not tried again until
	// the watch reports them free (or, as a backstop, until the time set).
	others := map[string]time.Time{}
	retry := make(chan string, 1<<14)
	type claimed struct {
		id   string
		held bool // another worker holds it
	}
	done := make(chan claimed, 256)
	for {
		var id string
		select {
		case <-ctx.Done():
			return
		case r := <-done:
			delete(pending, r.id)
			if r.held {
				others[r.id] = time.Now().Add(10 * wk.cfg.Scan)
			}
			continue
		case c := <-cand:
			id = c.id
			if c.why == fromTaken {
				// Another worker won it: a claim scheduled here would only
				// read the record to be told so.
				others[id] = time.Now().Add(10 * wk.cfg.Scan)
				continue
			}
			if h := wk.holding(id); h != nil {
				// A scan only nudges a held id that has not been drained
				// for a while: posts nudge it at once.
				if c.why != fromScan || time.Since(time.Unix(0, h.lastDone.Load())) >= wk.cfg.Scan {
					nudge(h)
				}
				continue
			}
			if c.why == fromFree {
				delete(others, id)
			} else if until, ok := others[id]; ok && time.Now().Before(until) {
				continue
			}
			if pending[id] {
				continue
			}
			pending[id] = true
			time.AfterFunc(wk.claimWait(id, c.why == fromFree), func() { offer(retry, id) })
			continue
		case id = <-retry:
		}
		if until, ok := others[id]; ok && time.Now().Before(until) || wk.holding(id) != nil {
			delete(pending, id)
			continue
		}
		// Claims run beside each other, at most cfg.Parallel at once: one
		// at a time, a worker facing thousands of new ids took a round
		// trip per id before it served any of them.
		select {
		case wk.claims <- struct{}{}:
		case <-ctx.Done():
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			held := wk.claim(ctx, wg, ss, id)
			<-wk.claims
			select {
			case done <- claimed{id, held}:
			case <-ctx.Done():
			}
		}()
	}
}

// claim takes id through the session and starts serving it; it says
// whether another worker holds id.
func (wk *Worker) claim(ctx context.Context, wg *sync.WaitGroup, ss *ownership.Session, id string) (heldByOther bool) {
	l, err := ss.Claim(ctx, id)
	if err != nil {
		if errors.Is(err, ownership.ErrHeld) {
			return true
		}
		if ctx.Err() == nil {
			wk.log.Warn("claim failed", "id", id, "error", err)
		}
		return false
	}
	drains, err := wk.dr.Hold(l)
	if err != nil {
		wk.log.Warn("cannot drain a claimed id", "id", id, "error", err)
		return false
	}
	hctx, lost := context.WithCancelCause(ctx)
	h := &holding{lease: l, drains: drains, more: make(chan struct{}, 1), inbox: make(chan *jetstream.RawStreamMsg, inboxSize), lost: lost}
	nudge(h)
	wk.mu.Lock()
	h.start, h.whole = wk.kept.take(id)
	wk.held[id] = h
	wk.mu.Unlock()
	wk.log.Info("claimed", "event", "claimed", "id", id, "epoch", l.Epoch)
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer lost(nil)
		wk.serve(hctx, ss, id, h)
	}()
	return false
}

// post puts a message from the feed in the holding's inbox, or, when the
// inbox is full, notes the gap.
func (h *holding) post(m *jetstream.RawStreamMsg) {
	select {
	case h.inbox <- m:
	default:
		h.gap.Store(true)
		nudge(h)
	}
}

// gapAll marks every held id's inbox as missing messages.
func (wk *Worker) gapAll() {
	wk.mu.Lock()
	defer wk.mu.Unlock()
	wk.kept = newKept(false) // what it kept may miss messages too
	for _, h := range wk.held {
		h.gap.Store(true)
		nudge(h)
	}
}

func nudge(h *holding) {
	select {
	case h.more <- struct{}{}:
	default:
	}
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

// serve drains one held id whenever it may have mail, until the holding is
// lost, the id stays idle for cfg.Idle (then it is released), or ctx ends.
func (wk *Worker) serve(ctx context.Context, ss *ownership.Session, id string, h *holding) {
	logged := false // "lost an id" was logged
	defer func() {
		if cause := context.Cause(ctx); !logged && errors.Is(cause, errTakenOver) {
			// Idle or busy: the watch ended the holding.
			wk.log.Info("lost an id", "event", "lost", "id", id, "epoch", h.lease.Epoch, "reason", cause)
		}
		// The last commit, if one is in flight, is taken before the id
		// is released (or the worker's node lease is).
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		if err := h.drains.Flush(fctx); err != nil {
			wk.log.Debug("last commit of an id", "id", id, "error", err)
		}
		cancel()
		wk.mu.Lock()
		delete(wk.held, id)
		wk.mu.Unlock()
	}()
	idle := time.NewTimer(wk.cfg.Idle)
	defer idle.Stop()
	backoff := 10 * time.Millisecond
	var msgs []*jetstream.RawStreamMsg
	// flush fires when what the holding delivered and owes a commit for
	// is due (drain.Holding.FlushBy): commits are coalesced per id.
	flush := time.NewTimer(time.Hour)
	flush.Stop()
	defer flush.Stop()
	for {
		msgs = msgs[:0]
		select {
		case <-ctx.Done():
			return
		case <-flush.C:
			if err := h.drains.Flush(ctx); err != nil {
				if ctx.Err() == nil && (errors.Is(err, ownership.ErrFree) || errors.Is(err, ownership.ErrHeld) || errors.Is(err, ownership.ErrFenced)) {
					wk.log.Info("lost an id", "event", "lost", "id", id, "epoch", h.lease.Epoch, "reason", err)
					logged = true
					return
				}
				wk.log.Debug("commit of an id", "id", id, "error", err)
				nudge(h) // deliver again from the cursor
			}
			continue
		case <-idle.C:
			if err := h.drains.Flush(ctx); err != nil {
				wk.log.Debug("last commit of an idle id", "id", id, "error", err)
				return
			}
			if err := ss.Release(ctx, id); err != nil && ctx.Err() == nil {
				wk.log.Debug("release of an idle id", "id", id, "error", err)
			} else if err == nil {
				wk.log.Info("released an idle id", "event", "released", "id", id, "epoch", h.lease.Epoch, "reason", "idle")
			}
			return
		case <-h.more:
		case m := <-h.inbox:
			msgs = takeInbox(append(msgs, m), h.inbox)
		}
		select {
		case wk.slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		res, err := wk.deliver(ctx, h, msgs)
		<-wk.slots
		if by := h.drains.FlushBy(); !by.IsZero() {
			flush.Reset(max(time.Until(by), 0))
		}
		if res.DeadLettered > 0 {
			wk.log.Info("dead-lettered", "event", "dead_lettered", "id", id, "epoch", h.lease.Epoch, "count", res.DeadLettered, "cursor", res.Cursor)
		}
		h.lastDone.Store(time.Now().UnixNano())
		switch {
		case err == nil:
			backoff = 10 * time.Millisecond
			if res.Count > 0 {
				idle.Reset(wk.cfg.Idle)
			}
			continue
		case ctx.Err() != nil:
			return
		case errors.Is(err, ownership.ErrFree), errors.Is(err, ownership.ErrHeld), errors.Is(err, ownership.ErrFenced):
			wk.log.Info("lost an id", "event", "lost", "id", id, "epoch", h.lease.Epoch, "reason", err)
			logged = true
			return
		}
		// Contended (a stale drain lock), unknown or transient: try again.
		wk.log.Debug("drain failed; retrying", "id", id, "error", err, "in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, max(wk.cfg.TTL/5, 10*time.Millisecond))
		nudge(h)
	}
}

// takeInbox adds what the inbox holds now to msgs (up to a batch).
func takeInbox(msgs []*jetstream.RawStreamMsg, inbox chan *jetstream.RawStreamMsg) []*jetstream.RawStreamMsg {
	for len(msgs) < inboxSize {
		select {
		case m := <-inbox:
			msgs = append(msgs, m)
		default:
			return msgs
		}
	}
	return msgs
}

// deliver hands out msgs from the inbox, or drains the id from its cursor
// when the holding is not caught up or the inbox missed messages (the gap
// is read after msgs were taken: a message dropped before one of msgs
// was put in the inbox set it first).
func (wk *Worker) deliver(ctx context.Context, h *holding, msgs []*jetstream.RawStreamMsg) (drain.Result, error) {
	if h.whole {
		// The first delivery, from what the worker kept: every message of
		// the id until the inbox took over, then the inbox's.
		h.whole = false
		first := append(h.start, msgs...)
		h.start = nil
		if !h.gap.Swap(false) {
			return h.drains.Start(ctx, first, wk.h)
		}
	}
	if len(msgs) > 0 && !h.gap.Swap(false) {
		if res, ok, err := h.drains.Deliver(ctx, msgs, wk.h); ok {
			if err == nil && !h.drains.Live() {
				nudge(h) // a failed delivery, to be tried again from the cursor
			}
			return res, err
		}
	}
	return h.drains.Drain(ctx, wk.h)
}

// claimFallback is how long, at least, a worker that is not a new id's
// first choice waits before it tries the id itself (the first choice may
// be gone, may not serve the id, or may not be listed here yet, or slow:
// its claims queue); the node lease ttl when longer.
const claimFallback = time.Second

// freedFallback is claimFallback for an id that was held (claimWait).
const freedFallback = 50 * time.Millisecond

// claimWait is how long the worker waits before it tries to claim a new
// id. Each id has its own order of the world's live nodes (rendezvous
// hashing: a hash of id and node): the first tries at once, the others
// after claimFallback and a delay that grows with the ids they hold, and
// the watch shows them the first one's claim, so that they never try.
// Ids spread evenly over the live nodes, and a new id costs one claim, not
// one per worker (under the fan-in bench 4 workers made 6 claims per id).
// Until the nodes were listed, the least loaded worker tries first.
//
// An id that was held and is free again (freed: a lapse, a release) is a
// takeover, whose gap users wait on: the others wait only freedFallback,
// at the cost of a race now and then (the first choice may be stopped, or
// killed and its node lease not lapsed yet; a node whose lease lapsed is
// dropped before its ids' lapses are handled).
func (wk *Worker) claimWait(id string, freed bool) time.Duration {
	load := min(time.Duration(wk.count())*wk.cfg.Spread, wk.cfg.MaxSpread) + rank(id, wk.cfg.Node, 10*wk.cfg.Spread)
	peers := wk.peers.Load()
	if peers == nil {
		return load
	}
	first, best := wk.cfg.Node, score(id, wk.cfg.Node)
	for _, n := range *peers {
		if sc := score(id, n); sc > best || sc == best && n < first {
			first, best = n, sc
		}
	}
	if first == wk.cfg.Node {
		return 0
	}
	if freed {
		return freedFallback + load
	}
	return max(claimFallback, wk.cfg.TTL) + load
}

// listPeers lists the live nodes again.
func (wk *Worker) listPeers(ctx context.Context) {
	nodes, err := wk.own.LiveNodes(ctx)
	if err != nil {
		if ctx.Err() == nil {
			wk.log.Debug("list of live nodes", "error", err)
		}
		return
	}
	slices.Sort(nodes)
	wk.peers.Store(&nodes)
}

// dropPeer removes a node whose node lease lapsed from the live nodes, so
// that the ids it held are not left to it.
func (wk *Worker) dropPeer(node string) {
	for {
		old := wk.peers.Load()
		if old == nil || !slices.Contains(*old, node) {
			return
		}
		next := slices.DeleteFunc(slices.Clone(*old), func(n string) bool { return n == node })
		if wk.peers.CompareAndSwap(old, &next) {
			return
		}
	}
}

// rank is id's delay for node, in [0, span): a hash of both, so that the
// workers of a world try a new id in an order of their own for each id.
func rank(id, node string, span time.Duration) time.Duration {
	if span <= 0 {
		return 0
	}
	return time.Duration(score(id, node) % uint64(span))
}

// score is the rendezvous hash of id and node.
func score(id, node string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(id))
	h.Write([]byte{0})
	h.Write([]byte(node))
	x := h.Sum64() // FNV mixes its last bytes poorly into the low bits: finish it (splitmix64)
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
