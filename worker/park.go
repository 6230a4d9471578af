package worker

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/ownership"
)

// defaultParkAfter is how long a held id's goroutine waits with nothing to
// do before it parks.
//
// A worker holds an id until it has been idle for Config.Idle (30 s by
// default), and a goroutine that waits for the id's next message costs its
// stack (8 KB once it has delivered), its timers and its inbox (2 KB):
// 12.8 KB per held id in all (BenchmarkHeldIDMemory), so that a worker
// holding 250,000 ids of a million held 3 GB. A parked holding keeps only
// its state (the lease, the drain.Holding); the goroutine and the inbox
// are made again when the id has work. An id with mail every second or
// more often never parks.
const defaultParkAfter = time.Second

// nudge tells the holding there may be mail to read from its cursor, and
// wakes it.
func nudge(h *holding) {
	select {
	case h.more <- struct{}{}:
	default:
	}
	h.wake()
}

// wake starts the holding's goroutine again if it is parked. Whoever gave
// it work (a message in the inbox, a nudge) did so before calling wake,
// and park looks for work under mu: either park saw the work and did not
// park, or wake sees parked and starts it.
func (h *holding) wake() {
	h.mu.Lock()
	if !h.parked {
		h.mu.Unlock()
		return
	}
	h.parked = false
	if h.idleWake != nil {
		h.idleWake.Stop()
		h.idleWake = nil
	}
	h.mu.Unlock()
	h.spawn()
}

// startHolding serves a claimed id until the holding ends: its goroutine
// runs, parks and is woken as work comes (serve). The holding counts in wg
// from now until it ended, parked or not, so that Run's wait covers it;
// the end of ctx (the worker stops, or the watch took the id over) wakes a
// parked holding, which then ends.
func (wk *Worker) startHolding(ctx context.Context, wg *sync.WaitGroup, ss *ownership.Session, id string, h *holding) {
	wg.Add(1)
	var stopWake func() bool
	h.spawn = func() {
		wk.serving.Add(1)
		go func() {
			parked := wk.serve(ctx, ss, id, h)
			wk.serving.Add(-1)
			if parked {
				return // wake runs it again
			}
			stopWake()
			h.lost(nil)
			wg.Done()
		}()
	}
	stopWake = context.AfterFunc(ctx, h.wake)
	h.spawn()
}

// park parks the holding if it has nothing to do: the caller flushed what
// it owed, all it handed out is covered (Clean), and no work came. It
// arranges to be woken when the idle release falls due. It says whether
// it parked; the caller's goroutine must then end at once.
func (wk *Worker) park(ctx context.Context, h *holding) bool {
	if !h.drains.Clean() {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if ctx.Err() != nil || len(h.more) > 0 || len(h.inbox) > 0 {
		return false
	}
	h.parked = true
	h.inbox = nil // 2 KB; the next post makes one again
	h.idleWake = time.AfterFunc(wk.idleLeft(h), h.wake)
	return true
}

// takeInbox is the inbox a running goroutine of the holding receives
// from: the one mail came in while it was parked, or a new one. It stays
// until the holding parks again.
func (h *holding) takeInbox() chan *jetstream.RawStreamMsg {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.inbox == nil {
		h.inbox = newInbox()
	}
	return h.inbox
}

// grow replaces the inbox with one twice its size (at most maxInboxSize),
// holding what the old one held, in order, and returns it: the inbox
// overflowed while the id drained, and at this id's rate a drain outlasts
// what it holds. A drain that outlasts its inbox leaves messages dropped
// after its last read, so the next delivery is a drain too, and so on:
// with 256 the counter bench's state holdings never delivered from their
// inbox (their drains wait on each commit's atomic batch).
func (h *holding) grow(inbox chan *jetstream.RawStreamMsg) chan *jetstream.RawStreamMsg {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.inbox != inbox || cap(inbox) >= maxInboxSize {
		return h.inbox
	}
	bigger := make(chan *jetstream.RawStreamMsg, min(2*cap(inbox), maxInboxSize))
	for len(inbox) > 0 {
		bigger <- <-inbox
	}
	h.inbox = bigger
	return bigger
}

// idleLeft is how long until the holding has been idle for Config.Idle.
func (wk *Worker) idleLeft(h *holding) time.Duration {
	return max(wk.cfg.Idle-time.Since(time.Unix(0, h.active.Load())), 0)
}
