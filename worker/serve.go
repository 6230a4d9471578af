package worker

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/ownership"
)

// endSlot takes one of the stopping worker's slots for an id's last writes
// and returns its release.
func (wk *Worker) endSlot() func() {
	wk.endSlots <- struct{}{}
	n := wk.endNow.Add(1)
	for m := wk.endMax.Load(); n > m && !wk.endMax.CompareAndSwap(m, n); m = wk.endMax.Load() {
	}
	return func() {
		wk.endNow.Add(-1)
		<-wk.endSlots
	}
}

// serve drains one held id whenever it may have mail, until the holding is
// lost, the id stays idle for cfg.Idle (then it is released), or ctx ends;
// or until it had nothing to do for a while: then it parks and says so
// (park.go), and its state waits in h for the goroutine that wake starts.
func (wk *Worker) serve(ctx context.Context, ss *ownership.Session, id string, h *holding) (parked bool) {
	logged := false   // "lost an id" was logged
	released := false // released when idle
	defer func() {
		if parked {
			return
		}
		if cause := context.Cause(ctx); !logged && errors.Is(cause, errTakenOver) {
			// Idle or busy: the watch ended the holding.
			wk.log.Info("lost an id", "event", "lost", "id", id, "epoch", h.lease.Epoch, "reason", cause)
		}
		// The last commit, if one is in flight, is taken before the id
		// is released (or the worker's node lease is). A worker that stops
		// releases a clean holding's id itself: the next holder then knows
		// it had nothing uncommitted, and labels nothing maybe seen
		// (drain.Message.Redelivered); any other id goes with the node
		// lease, and the next holder labels its backlog.
		if ctx.Err() != nil {
			// The worker stops: every held id ends at once, and each
			// sends its writes in turn with at most stopWrites others.
			defer wk.endSlot()()
		}
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		if err := h.drains.Flush(fctx); err != nil {
			wk.log.Debug("last commit of an id", "id", id, "error", err)
		} else if !released && !logged && !errors.Is(context.Cause(ctx), errTakenOver) && ss.Cause() == "" && h.drains.Clean() {
			if err := ss.ReleaseHeld(fctx, h.lease); err != nil {
				wk.log.Debug("release of an id at stop", "id", id, "error", err)
			}
		}
		cancel()
		if wk.parts != nil {
			// Before the id leaves the map: a claim of it again (which
			// waits for that) subscribes anew, and this drop cannot
			// undo it.
			wk.parts.drop(id)
		}
		wk.mu.Lock()
		delete(wk.held, id)
		wk.mu.Unlock()
		// The feed may have put posts in the inbox after the last look
		// (or found the holding just before it left the map: post then
		// refuses, now that it is gone). Nobody else knows of them: with
		// the id free (an idle release) they waited for its next post, or
		// the scan (TestPartitioned_ListedIDs, under load).
		h.mu.Lock()
		h.gone = true
		left := len(h.inbox) > 0
		h.mu.Unlock()
		if left && ctx.Err() == nil {
			if wk.parts != nil {
				wk.parts.noteMail(id)
			}
			wk.propose(wk.cand, candidate{id, fromPost})
		}
		if wk.parts != nil && errors.Is(context.Cause(ctx), errTakenOver) {
			// Taken while this worker read its posts: whatever it had not
			// committed is the new holder's, and if that one lets it go
			// (a forced seize, then a release) nobody else may know there
			// is mail (parts.mail). A candidate again: a claim finds the
			// id held, or free and with mail.
			wk.parts.noteMail(id)
			wk.propose(wk.cand, candidate{id, fromFree})
		}
	}()
	inbox := h.takeInbox()
	idle := time.NewTimer(wk.idleLeft(h))
	defer idle.Stop()
	linger := time.NewTimer(wk.parkAfter)
	defer linger.Stop()
	backoff := 10 * time.Millisecond
	var msgs []*jetstream.RawStreamMsg
	// flush fires when what the holding delivered and owes a commit for
	// is due (drain.Holding.FlushBy): commits are coalesced per id.
	flush := time.NewTimer(time.Hour)
	flush.Stop()
	defer flush.Stop()
	// flushNow commits what the holding owes; it says whether the holding
	// was lost (then logged). A commit that failed otherwise is delivered
	// again from the cursor (a nudge).
	flushNow := func() (lost bool) {
		err := h.drains.Flush(ctx)
		if err == nil {
			return false
		}
		if ctx.Err() == nil && (errors.Is(err, ownership.ErrFree) || errors.Is(err, ownership.ErrHeld) || errors.Is(err, ownership.ErrFenced)) {
			wk.log.Info("lost an id", "event", "lost", "id", id, "epoch", h.lease.Epoch, "reason", err)
			logged = true
			return true
		}
		wk.log.Debug("commit of an id", "id", id, "error", err)
		nudge(h) // deliver again from the cursor
		return false
	}
	for {
		msgs = msgs[:0]
		linger.Reset(wk.parkAfter)
		select {
		case <-linger.C:
			if flushNow() {
				return
			}
			if wk.park(ctx, h) {
				return true
			}
			continue
		case <-ctx.Done():
			return
		case <-flush.C:
			if flushNow() {
				return
			}
			continue
		case <-idle.C:
			if len(inbox) > 0 {
				// Mail came as the release fell due: deliver it first.
				h.active.Store(time.Now().UnixNano())
				idle.Reset(wk.cfg.Idle)
				continue
			}
			if err := h.drains.Flush(ctx); err != nil {
				wk.log.Debug("last commit of an idle id", "id", id, "error", err)
				return
			}
			if !h.drains.Clean() {
				// Handed out and not committed (a commit of unknown
				// outcome): deliver again from the cursor first.
				h.active.Store(time.Now().UnixNano())
				idle.Reset(wk.cfg.Idle)
				nudge(h)
				continue
			}
			released = true
			if wk.parts != nil {
				// Every post it saw is handed out and committed: not
				// claimed again until a post comes. Cleared here, before
				// the release is written, so that a post that comes
				// after (to the inbox, then serve's end, or to the feed
				// once the holding is gone) notes its mail again.
				wk.parts.clearMail(id)
			}
			if err := ss.ReleaseHeld(ctx, h.lease); err != nil && ctx.Err() == nil {
				wk.log.Debug("release of an idle id", "id", id, "error", err)
			} else if err == nil {
				wk.log.Info("released an idle id", "event", "released", "id", id, "epoch", h.lease.Epoch, "reason", "idle")
			}
			return
		case <-h.more:
		case m := <-inbox:
			msgs = takeInbox(append(msgs, m), inbox)
		}
		select {
		case wk.slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		res, err := wk.deliver(ctx, h, msgs)
		<-wk.slots
		if h.full.Swap(false) {
			inbox = h.grow(inbox)
		}
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
				h.active.Store(time.Now().UnixNano())
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
// when the holding is not caught up or the inbox missed messages it has
// not handed out. The gap is read after msgs were taken: a message dropped
// before one of msgs was put in the inbox noted its sequence first, and
// one dropped later comes after all of msgs.
//
// A drop the holding covers (every message up to the highest dropped one
// handed out: a drain that ran meanwhile read them) needs no drain, and
// leaves msgs whole after the holding's position: each message after it
// reached the inbox, in stream order, or it would have been dropped too,
// and so be at or below that highest one (docs/design/pipeline.md point 1,
// "An inbox that overflows"). A drain that outlasts its inbox overflows it; the inbox
// then grows (holding.grow).
func (wk *Worker) deliver(ctx context.Context, h *holding, msgs []*jetstream.RawStreamMsg) (drain.Result, error) {
	if h.whole {
		// The first delivery, from what the worker kept: every message of
		// the id until the inbox took over, then the inbox's.
		h.whole = false
		first := append(h.start, msgs...)
		h.start = nil
		if h.dropped.Swap(0) == 0 {
			return h.retryFailed(h.drains.Start(ctx, first, wk.h))
		}
	} else if d := h.dropped.Swap(0); d == 0 || h.drains.Covers(d) {
		if len(msgs) > 0 {
			if res, ok, err := h.drains.Deliver(ctx, msgs, wk.h); ok {
				return h.retryFailed(res, err)
			}
		} else if d != 0 {
			return drain.Result{}, nil // woken by a drop a drain already covered
		}
	}
	wk.drainRuns.Add(1)
	return h.drains.Drain(ctx, wk.h)
}

// retryFailed passes on the outcome of a delivery that handed out
// messages without reading the mailbox (drain.Holding.Start, Deliver).
// One that ended without an error and not live failed a message: the
// holding committed its failure count and waited its backoff, and it is
// nudged to deliver it again from the cursor at once (a drain). Nothing
// else would wake it: its message was taken from the inbox, and the idle
// release and the scan come only after many seconds (a newcomer found the
// first delivery of a newly claimed id was not nudged so).
func (h *holding) retryFailed(res drain.Result, err error) (drain.Result, error) {
	if err == nil && !h.drains.Live() {
		nudge(h)
	}
	return res, err
}
