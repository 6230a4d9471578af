package drain

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/fencepost/fencepost/fencing"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/ownership"
)

// Holding is the right of one process to drain one id it holds through its
// node lease session (ownership.Session): a worker makes one per id it
// claims (Hold) and drains through it, one drain at a time. A Holding's
// drain pays one leader read of the record (is it still at the holding's
// revision?), the reads of the messages and the fenced commits (and the
// purge). It takes no drain lock, reads no node lease and, after its first
// drain, no cursor (docs/design.md 3.9):
//
//   - exclusive without a lock: the session is one process's (its node
//     lease epoch never repeats), the process runs one drain per Holding
//     at a time, and every other way to drain refuses an id held through a
//     session (*ContendedError with Session set);
//   - authority: at the start, the record still at the holding's revision
//     (else Authorize decides, and a seized holding gets nothing); before
//     each handler call, the session's local deadline (Lease.Valid) and the
//     caller's context (which a worker cancels when the watch shows a
//     newer epoch); every commit fenced on the record's revision;
//   - the cursor it committed last is the stored one: nobody else writes
//     it while the holding lasts. After a commit whose outcome is unknown
//     the next drain reads it again.
type Holding struct {
	d     *Drainer
	lease *ownership.Lease

	mu    sync.Mutex    // one drain at a time
	fence fencing.Fence // the lease's, refreshed if a drain re-read the record
	cur   wire.Cursor
	known bool // cur is the stored cursor
}

// Hold returns the Holding of a lease won through a session. A lease of
// its own (Store.Claim, Seize) is drained with DrainLease instead.
func (d *Drainer) Hold(l *ownership.Lease) (*Holding, error) {
	if !l.Backed() {
		return nil, fmt.Errorf("%w: Hold takes a lease won through a session (ownership.Session); drain %q with DrainLease", ErrInvalidOption, l.ID)
	}
	return &Holding{d: d, lease: l, fence: l.Fence}, nil
}

// Lease is the holding's lease.
func (h *Holding) Lease() *ownership.Lease { return h.lease }

// Drain delivers the id's mailbox to hd until it is empty (or WithMax),
// with DrainLease's outcomes: *ownership.FencedError, *HeldError or
// *FreeError once the holding is lost (after the last commit the broker
// accepted), *UnknownError when a commit's outcome is unknown.
func (h *Holding) Drain(ctx context.Context, hd Handler, opts ...RunOption) (res Result, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	d, l := h.d, h.lease
	defer d.observe(time.Now(), &res)
	if !l.Valid() {
		return Result{}, &ownership.FreeError{ID: l.ID, LastEpoch: l.Epoch}
	}
	var o runOptions
	for _, opt := range opts {
		opt(&o)
	}
	a := &authority{id: l.ID, node: l.Node, epoch: l.Epoch, ttl: l.TTL, fence: h.fence, backed: true, lease: l}
	// Invariant 4: nothing to a holding that is no longer on the record.
	// One leader read proves it unchanged; a changed record is decided
	// in full (a seize: refused before anything is delivered).
	if same, err := d.own.Unchanged(ctx, l.ID, h.fence.Revision); err != nil {
		return Result{}, err
	} else if !same {
		if err := d.authorize(ctx, a); err != nil {
			return Result{}, err
		}
		h.fence = a.fence
	}
	r := &run{d: d, a: a, h: hd, o: o, committed: time.Now(),
		subj:       wire.MailboxSubject(d.world, l.ID),
		cursorSubj: wire.KeySubject(d.world, wire.CursorKey(l.ID)),
	}
	r.ctx, r.stop = context.WithCancelCause(ctx)
	if h.known {
		r.cur, r.res.Cursor = h.cur, h.cur.Seq
	} else if err := r.loadCursor(r.ctx); err != nil {
		r.stop(nil)
		return Result{}, err
	}
	err = r.loop(r.ctx)
	res, err = r.end(ctx, err)
	// A fence the drain refreshed (a refused commit that re-read the
	// record and found the holding unchanged) carries on to the next one.
	h.fence = a.fence
	h.cur, h.known = r.cur, !r.uncertain
	if d.log.Enabled(ctx, slog.LevelDebug) {
		d.log.Debug("drain", "world", d.world, "id", l.ID, "epoch", l.Epoch, "count", res.Count, "cursor", res.Cursor, "error", err, "holding", true)
	}
	return res, err
}
