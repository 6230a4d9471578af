package shard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/fencing"
	"github.com/fencepost/fencepost/internal/follow"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/store"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/queue"
)

// holder delivers one held shard: its reader hands the shard's mail in
// stream order to the loop, which owns the book, hands each id's first
// message to the handler, commits the book's cursor fenced by the shard's
// record, and removes what the commits cover. It never asks an ownership
// question on its path: the lease says until when it may hand out, and the
// broker refuses its commits once the record moved.
type holder struct {
	wk    *Worker
	q     int
	unit  string
	lease *ownership.Lease
	log   *slog.Logger

	ctx    context.Context // ends when the holding must stop at once
	cancel context.CancelCauseFunc
	// hctx is the handlers' context: h.ctx, also ended when a graceful
	// stop has waited drainWait for the calls running.
	hctx      context.Context
	hcancel   context.CancelCauseFunc
	drainReq  chan struct{} // closed: hand out nothing more, commit, stop
	drainOnce sync.Once
	ended     chan struct{} // closed when run returned
	err       error         // why it ended (after ended)

	// Loop state (run's goroutine only).
	b          *book
	results    chan result
	retries    chan string
	committed  wire.ShardCursor // the last cursor the broker accepted
	committing bool             // a commit is in flight (commits says its end)
	// fence is what commits are written with: the lease's, or the
	// record's revision since, when a commit was refused over a record
	// that still names this holding (refence; for a drain by hand, whose
	// holder renewed).
	fence      fencing.Fence
	refused    int // commits refused in a row over a record that still named the holding (refence)
	commits    chan commitEnd
	removedTo  uint64 // the last removal bound the server took
	lastRemove time.Time
	removing   bool          // a purge is in flight (removals says its end)
	removeWait time.Duration // between removals: RemoveEvery, more after failures
	removals   chan removal
	inflight   int // handler calls running

	// Per-id state (Config.State; state.go): each id's state as this
	// holding knows it, and the writes of handled messages not yet
	// committed, per id in stream order. cursorAt: the stream sequence of
	// the cursor the holding began from.
	states   map[string]*drain.IDState
	unc      map[string][]handled
	cursorAt uint64

	// answers: the answers of calls handled (or dead-lettered) and not
	// yet covered by an accepted commit (call.go).
	answers []answer

	// rd is the shard's reader; once is set for a drain by hand
	// (handdrain.go), nil for a worker's holding.
	rd   *follow.Follower
	once *handDrain
}

type result struct {
	eid string
	// acked: the id's messages acknowledged before the one this result
	// is about (a batch); each is done before the rest is settled.
	acked int
	err   error // the handler's (nil: acknowledged)
	dead  bool  // a dead-letter write ended (err: its failure)
	// With state: the id's state (read for this call if it was not
	// known), whether the call never ran (the state could not be read:
	// not the message's fault), and the writes of each acknowledged
	// message, in stream order.
	st      *drain.IDState
	notRun  bool
	handled []handled
	// isCall: the message was a call, and answer what its handler
	// answered (drain.CallAnswer).
	isCall bool
	answer []byte
}

func (wk *Worker) newHolder(q int, l *ownership.Lease) *holder {
	ctx, cancel := context.WithCancelCause(wk.rctx)
	hctx, hcancel := context.WithCancelCause(ctx)
	return &holder{
		wk: wk, q: q, unit: wire.ShardUnit(q), lease: l, fence: l.Fence,
		log: wk.log.With("shard", q, "epoch", l.Epoch),
		ctx: ctx, cancel: cancel, hctx: hctx, hcancel: hcancel,
		drainReq:   make(chan struct{}),
		ended:      make(chan struct{}),
		results:    make(chan result, 64),
		retries:    make(chan string, 64),
		removals:   make(chan removal, 1),
		commits:    make(chan commitEnd, 1),
		removeWait: wk.cfg.RemoveEvery,
		states:     map[string]*drain.IDState{},
		unc:        map[string][]handled{},
	}
}

// drainWait is how long a graceful stop waits for the handler calls
// running before it cancels them: a third of the ttl, so that the last
// commit and the release come well inside the lease.
func drainWait(ttl time.Duration) time.Duration { return ttl / 3 }

var errDrainTimeout = errors.New("shard: graceful stop: handlers cancelled")

// errNotHolder: the holder's lease is not valid by the local clock right
// before a handler call, which is not made.
var errNotHolder = errors.New("shard: the lease is not valid now")

// errLost: the broker refused a commit, the shard's record moved.
var errLost = errors.New("shard: the shard's record moved: another holder has it")

// run serves the shard until it is told to drain (a handoff, the worker's
// end) or stopped (lost, fenced).
func (h *holder) run() {
	defer close(h.ended)
	err := h.serve()
	h.err = err
	h.cancel(err)
}

func (h *holder) serve() error {
	cur, err := h.readCursor()
	if err != nil {
		return err
	}
	// removedTo starts at 0: what the stored cursor covers may still be
	// stored (a holder stopped before its next removal), and the first
	// removal is due at once.
	h.b, h.committed = newBook(cur), cur
	msgs, stopRead, err := h.read(h.b.from())
	if err != nil {
		return err
	}
	defer stopRead()
	h.log.Info("serving shard", "event", "shard_served", "from", h.b.from(), "mark", cur.Seq, "pending", len(cur.Pending))

	commitTick := time.NewTimer(untilTick(h.wk.cfg.CommitEvery))
	defer commitTick.Stop()
	draining, drainReq := false, h.drainReq
	var drainTimeout <-chan time.Time
	for {
		h.dispatch(draining)
		if h.once != nil && !draining && h.once.over(h, len(msgs)) {
			draining, drainReq = true, nil
		}
		if draining && h.inflight == 0 {
			return h.finish()
		}
		in := msgs
		if draining || h.b.queued >= h.wk.cfg.ReadAhead {
			in = nil
		}
		select {
		case m, ok := <-in:
			if !ok {
				return fmt.Errorf("shard %d: the reader ended: %w", h.q, context.Cause(h.ctx))
			}
			h.add(m)
			h.addReady(in)
		case r := <-h.results:
			h.settle(r)
			h.settleReady()
			if len(h.answers) > 0 {
				// A caller waits for the commit: make it now, not at
				// the next tick.
				h.commitDue()
			}
		case e := <-h.commits:
			if err := h.commitEnded(e); err != nil {
				return err
			}
			if e.err == nil && len(h.answers) > 0 {
				h.commitDue() // the answers the commit did not cover
			}
		case r := <-h.removals:
			h.removed(r)
		case eid := <-h.retries:
			h.b.retry(eid)
		case <-commitTick.C:
			h.commitDue()
			commitTick.Reset(untilTick(h.wk.cfg.CommitEvery))
		case <-drainReq:
			draining, drainReq = true, nil
			drainTimeout = time.After(drainWait(h.wk.cfg.TTL))
		case <-drainTimeout:
			h.log.Warn("handlers still running at the end of a graceful stop; cancelling them", "running", h.inflight)
			h.hcancel(errDrainTimeout)
		case <-h.ctx.Done():
			return context.Cause(h.ctx)
		}
	}
}

// untilTick is the time to the next multiple of d on the wall clock, the
// next commit tick: the holders of a worker tick together, so the state
// commits they make at a tick meet in the worker's shared batches
// (Worker.states) instead of each going out alone.
func untilTick(d time.Duration) time.Duration {
	now := time.Now()
	return now.Truncate(d).Add(d).Sub(now)
}

// addReady takes the messages the reader has ready, up to the read-ahead,
// without a turn of serve's select for each: one message in, one call
// settled and one handed out per turn cost a select of nine cases for
// every message (BenchmarkShardSteady).
func (h *holder) addReady(in <-chan *jetstream.RawStreamMsg) {
	for h.b.queued < h.wk.cfg.ReadAhead {
		select {
		case m, ok := <-in:
			if !ok {
				return // serve's select sees the end
			}
			h.add(m)
		default:
			return
		}
	}
}

// settleReady takes the calls' ends that are ready, as addReady takes
// messages.
func (h *holder) settleReady() {
	for {
		select {
		case r := <-h.results:
			h.settle(r)
		default:
			return
		}
	}
}

// readCursor reads the shard's cursor (none yet: the zero cursor).
func (h *holder) readCursor() (wire.ShardCursor, error) {
	ctx, cancel := jsapi.WithTimeout(h.ctx)
	defer cancel()
	hd := handles.Of(h.wk.w)
	m, err := jsapi.LeaderGet(ctx, hd.JS.Conn(), wire.BucketStream(h.wk.w.Name), jsapi.GetRequest{LastFor: wire.KeySubject(h.wk.w.Name, wire.CursorKey(h.unit))})
	if errors.Is(err, jsapi.ErrNotFound) {
		return wire.ShardCursor{}, nil
	}
	if err != nil {
		return wire.ShardCursor{}, fmt.Errorf("shard %d: read its cursor: %w", h.q, err)
	}
	if jsapi.IsMarker(m.Header) {
		return wire.ShardCursor{}, nil
	}
	c, err := wire.DecodeShardCursor(m.Data)
	if err != nil {
		return wire.ShardCursor{}, fmt.Errorf("shard %d: its cursor at revision %d: %w; inspect the key, or reset the world", h.q, m.Sequence, err)
	}
	h.cursorAt = m.Sequence
	return c, nil
}

// add takes one message of the shard from the reader.
func (h *holder) add(m *jetstream.RawStreamMsg) {
	id, eid, q, err := wire.ShardedID(h.wk.w.Name, m.Subject, h.wk.w.Config.Shards)
	if err != nil && wire.ShardedUnroutable(h.wk.w.Name, m.Subject, h.wk.w.Config.Shards) == h.q {
		// A post to a mailbox subject whose token is no id's: it is
		// moved to the world's unroutable dead letters, then done, as
		// one message of an id of its own (wire.UnroutableToken).
		h.b.add(m, "", unroutableEID(m.Sequence))
		return
	}
	if err != nil || q != h.q {
		// Not a post of this shard's (the filter makes this impossible
		// short of a broken stream): never handed out, never excused,
		// so the mark stops before it and the shard stalls loudly.
		h.log.Error("shard reader: a message that is not this shard's; delivery of the shard stops here", "seq", m.Sequence, "subject", m.Subject, "error", err)
		h.cancel(fmt.Errorf("shard %d: message %d on %q is not the shard's", h.q, m.Sequence, m.Subject))
		return
	}
	h.b.add(m, id, eid)
}

// dispatch hands out the first message of every ready id, while the
// worker has slots and the lease allows.
func (h *holder) dispatch(draining bool) {
	if draining {
		return
	}
	for len(h.b.ready) > 0 {
		if !h.lease.Valid() {
			// Every route refuses work on a lapsed lease before the fence
			// runs: the session renews or self-fences; until then, wait.
			return
		}
		take := h.b.take
		if h.once != nil {
			if h.once.budget(h.inflight) == 0 {
				return
			}
			take = h.b.takeOldest
		}
		select {
		case h.wk.slots <- struct{}{}:
		default:
			return
		}
		q, e, delivery, ok := take()
		if !ok {
			<-h.wk.slots
			return
		}
		h.inflight++
		if e.id == "" {
			h.wk.spawn(func() { h.moveUnroutable(e) })
			continue
		}
		if delivery > h.wk.w.Config.MaxDeliveries {
			lastErr := q.lastErr
			h.wk.spawn(func() { h.deadLetter(e, delivery-1, lastErr) })
			continue
		}
		msgs := h.batch(q, delivery)
		st := h.states[e.eid]
		h.wk.spawn(func() { h.call(e, msgs, st) })
	}
}

// maxBatch bounds the messages of one id handed to one call (batch).
const maxBatch = 64

// batch is what one call hands the handler of the id of q, one message
// after the other: its first message (delivery number delivery), and
// after it the messages queued behind it, up to maxBatch and up to the
// first call. One goroutine's turn, one result and one turn of the loop
// per id instead of per message: an id with mail queued is the common
// case of steady, takeover and counter. A call comes alone (its answer
// waits for the commit that covers it). With state, each message of a
// batch gets the state its predecessors' writes left, and keeps its own
// writes (result.handled), as if each were a call of its own.
func (h *holder) batch(q *idq, delivery int) []drain.Message {
	first := h.message(q.msgs[0], delivery)
	if first.IsCall() {
		return []drain.Message{first}
	}
	msgs := []drain.Message{first}
	if h.once != nil {
		return msgs // a drain by hand: one message at a time, in stream order
	}
	for _, e := range q.msgs[1:min(len(q.msgs), maxBatch)] {
		m := h.message(e, 1)
		if m.IsCall() {
			break
		}
		msgs = append(msgs, m)
	}
	return msgs
}

func (h *holder) message(e *entry, delivery int) drain.Message {
	from, ok := queue.Sender(e.m.Header)
	if !ok {
		h.log.Warn("message with an invalid sender; delivered without it", "id", e.id, "seq", e.m.Sequence)
	}
	m := drain.Message{
		ID: e.id, Seq: e.m.Sequence, From: from, Body: e.m.Data,
		Headers: queue.UserHeaders(e.m.Header), Posted: e.m.Time,
		Delivery: delivery, Fence: h.fence,
		Redelivered: delivery > 1 || (!h.lease.PriorUntil.IsZero() && !e.m.Time.After(h.lease.PriorUntil)),
	}
	drain.PrepareCall(&m, e.m.Header, handles.Of(h.wk.w).JS.Conn())
	return m
}

// call runs the handler for one message and reports back. With state,
// st is the id's state (nil: not read yet in this holding, read here:
// only this call touches the id's state while it runs).
func (h *holder) call(e *entry, msgs []drain.Message, st *drain.IDState) {
	defer func() { <-h.wk.slots }()
	r := result{eid: e.eid}
	var m drain.Message
	for i := range msgs {
		m = msgs[i]
		switch {
		case h.hctx.Err() != nil || !h.lease.Valid():
			// Checked again right before each call: the loop's check
			// came before this goroutine ran, and a pause (a stopped
			// process) in between would otherwise hand the message out
			// after a takeover.
			r.notRun, r.err = true, errNotHolder
		case h.wk.cfg.State:
			st = h.callWithState(&r, e, m, st)
		default:
			r.err = h.wk.handle(h.hctx, m)
		}
		if r.err != nil || i == len(msgs)-1 {
			break
		}
		r.acked++
	}
	if r.err == nil && !r.notRun && m.IsCall() {
		// An answer that cannot be sent fails the delivery, as a
		// handler's error does (drain.ErrAnswerTooLarge).
		r.isCall = true
		r.answer, r.err = drain.CallAnswer(m)
	}
	select {
	case h.results <- r:
	case <-h.ended:
	}
}

// deadLetter moves the id's first message to its dead letters after its
// last failed delivery, then reports back.
func (h *holder) deadLetter(e *entry, deliveries int, herr string) {
	defer func() { <-h.wk.slots }()
	meta := nats.Header{}
	meta.Set(wire.HeaderDeadDeliveries, strconv.Itoa(deliveries))
	meta.Set(wire.HeaderDeadNode, h.lease.Node)
	meta.Set(wire.HeaderDeadEpoch, strconv.FormatUint(h.lease.Epoch, 10))
	meta.Set(wire.HeaderDeadError, store.Clip(herr))
	ctx, cancel := jsapi.WithTimeout(h.ctx)
	err := store.WriteDead(ctx, h.wk.w, wire.DeadLetterSubject(h.wk.w.Name, e.id), e.m, meta)
	cancel()
	if err == nil {
		h.log.Warn("message dead-lettered", "event", "dead_lettered", "id", e.id, "seq", e.m.Sequence, "deliveries", deliveries, "error", store.Clip(herr))
	}
	select {
	case h.results <- result{eid: e.eid, err: err, dead: true}:
	case <-h.ended:
	}
}

// unroutableEID is the book's name of the unroutable message at seq: no
// id's token holds '=', so it is no id's.
func unroutableEID(seq uint64) string {
	return wire.UnroutableToken + "." + strconv.FormatUint(seq, 10)
}

// moveUnroutable moves a stored post that no id reads to the world's
// unroutable dead letters (once: store.WriteDead), then reports it done;
// the shard's purge removes it with the rest.
func (h *holder) moveUnroutable(e *entry) {
	defer func() { <-h.wk.slots }()
	meta := nats.Header{}
	meta.Set(wire.HeaderDeadSubject, store.Clip(e.m.Subject))
	meta.Set(wire.HeaderDeadError, "unroutable: the subject's token is not an id's")
	ctx, cancel := jsapi.WithTimeout(h.ctx)
	err := store.WriteDead(ctx, h.wk.w, wire.UnroutableSubject(h.wk.w.Name), e.m, meta)
	cancel()
	if err == nil {
		h.log.Warn("unroutable message moved to the world's dead letters", "event", "unroutable", "subject", e.m.Subject, "seq", e.m.Sequence)
	}
	select {
	case h.results <- result{eid: e.eid, err: err, dead: true}:
	case <-h.ended:
	}
}

// settle takes a handler call's or dead-letter write's end.
func (h *holder) settle(r result) {
	h.inflight--
	if h.once != nil && !r.notRun && !r.dead {
		h.once.deliveries += r.acked + 1
	}
	for range r.acked {
		h.done(r.eid, false)
	}
	q := h.b.ids[r.eid]
	if r.st != nil {
		h.states[r.eid] = r.st
	}
	// Every acknowledged message's writes, the batch's last included
	// when it was acknowledged; whatever the rest of the batch did.
	for _, x := range r.handled {
		if len(x.writes) > 0 {
			h.unc[r.eid] = append(h.unc[r.eid], x)
		}
	}
	switch {
	case r.notRun && errors.Is(r.err, errNotHolder):
		h.b.release(r.eid) // the session renews, or fences and ends the holding
		h.b.hold(r.eid)
		h.later(r.eid, h.wk.cfg.BackoffMin)
	case r.notRun:
		h.log.Warn("the id's state could not be read; trying again", "id", q.id, "error", r.err)
		h.b.release(r.eid)
		h.b.hold(r.eid)
		h.later(r.eid, h.wk.cfg.BackoffMin)
	case r.err == nil:
		if e := q.msgs[0]; r.isCall {
			h.answers = append(h.answers, answer{eid: r.eid, m: e.m, body: r.answer})
		} else if r.dead && e.id != "" {
			h.answers = append(h.answers, answer{eid: r.eid, m: e.m, failed: q.lastErr})
		}
		h.done(r.eid, r.dead)
	case h.hctx.Err() != nil:
		// Stopped while it ran: not the message's fault.
		h.b.release(r.eid)
	case r.dead:
		h.log.Warn("dead letter not written; retrying", "id", q.id, "error", r.err)
		h.b.release(r.eid)
		h.b.hold(r.eid)
		h.later(r.eid, h.wk.cfg.BackoffMin)
	default:
		h.b.failed(r.eid, store.Clip(r.err.Error()))
		delivery := q.failures
		if delivery >= h.wk.w.Config.MaxDeliveries {
			// Its last delivery: dead-letter it at once, no backoff.
			h.b.makeReady(r.eid, q)
			h.log.Info("delivery failed", "event", "failed", "id", q.id, "seq", q.msgs[0].m.Sequence, "delivery", delivery, "error", q.lastErr)
			return
		}
		wait := h.wk.backoff(delivery)
		h.log.Info("delivery failed", "event", "failed", "id", q.id, "seq", q.msgs[0].m.Sequence, "delivery", delivery, "retry_in", wait, "error", q.lastErr)
		h.b.hold(r.eid)
		h.later(r.eid, wait)
	}
}

// done records that the id's first message was handled (dead: moved to
// the dead letters).
func (h *holder) done(eid string, dead bool) {
	if h.once != nil {
		h.once.record(h.b.ids[eid], dead)
	}
	h.b.done(eid)
}

// later makes the id ready again after d.
func (h *holder) later(eid string, d time.Duration) {
	time.AfterFunc(d, func() {
		select {
		case h.retries <- eid:
		case <-h.ended:
		}
	})
}
