package shard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/fencing"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/world"
)

// Drain is the contract's drain in a sharded world (docs/contract.md,
// "Sharded worlds"): the holder (node, epoch) of shard q, which it won by
// a claim or seize of its own, delivers the shard's mail to h until the
// shard has none left (or opts.Max messages were acknowledged),
// commits, and returns done(count). It is the engine a worker's holding
// runs (holder.go), for one holding, with one handler call at a time: per
// id in posting order, a failing id's retries, backoff and dead letter its
// own, every commit fenced by the shard's record.
//
// Refusals write nothing and come from drain.Drainer.LockUnit: the holder
// check (*ownership.HeldError, *ownership.FreeError,
// *ownership.FencedError; *drain.ContendedError with Session set when a
// worker holds the shard through its node lease), then the shard's drain
// lock (*drain.ContendedError while another drain of the shard runs).
//
// The drain acts on the lease it reads at its start; when that runs out
// with mail left, it commits what was handled and reads the record again,
// so a holder that renewed goes on and one that did not gets the record's
// answer. A commit the broker refuses (the shard's record moved) ends it
// with that answer. When ctx ends it stops handing out, lets the call
// running end (a third of the ttl at most), commits, and returns
// ctx's cause. Result.Count counts only messages its commits cover.
func Drain(ctx context.Context, w *world.World, own *ownership.Store, dr *drain.Drainer, q int, node string, epoch uint64, h drain.Handler, opts DrainOptions) (res drain.Result, err error) {
	switch {
	case !w.Config.Sharded():
		return res, fmt.Errorf("shard: world %q is a per-id world: drain its ids with drain.Drainer", w.Name)
	case q < 0 || q >= w.Config.Shards:
		return res, fmt.Errorf("%w: shard %d: world %q has shards 0 to %d", fencing.ErrInvalidOption, q, w.Name, w.Config.Shards-1)
	case opts.Max < 0:
		return res, fmt.Errorf("%w: max %d: give 0 (no bound) or more", fencing.ErrInvalidOption, opts.Max)
	}
	wk, err := New(w, own, Config{Node: node, Parallel: 1, Log: opts.Log}, h)
	if err != nil {
		return res, err
	}
	unit := wire.ShardUnit(q)
	lk, err := dr.LockUnit(ctx, unit, node, epoch)
	if err != nil {
		return res, err
	}
	// Delivery stops at once when the lock is lost; ctx's end is a
	// graceful stop (stopDraining below).
	rctx, cancel := context.WithCancelCause(lk.Context())
	wk.rctx, wk.cancel = rctx, cancel
	defer func() {
		cancel(nil)
		lk.Release(ctx, ctx.Err() != nil)
	}()
	var prior time.Time
	if epoch > 1 || lk.TookOver() {
		// How the epoch was won is not known here: an earlier holding
		// may have handed out what was stored before now.
		prior = time.Now().Add(ownership.DefaultMaxSkew)
	}
	for {
		l, err := own.Adopt(rctx, unit, node, epoch, prior)
		if err != nil {
			return res, err
		}
		hd := wk.newHolder(q, l)
		hd.once = &handDrain{lock: lk, adopt: func() (*ownership.Lease, error) {
			actx, cancel := context.WithTimeout(rctx, 5*time.Second)
			defer cancel()
			return own.Adopt(actx, unit, node, epoch, prior)
		}}
		if opts.Max > 0 {
			if hd.once.max = opts.Max - res.Acked; hd.once.max <= 0 {
				return res, nil
			}
		}
		stop := context.AfterFunc(ctx, hd.stopDraining)
		hd.run()
		stop()
		hd.once.count(&res, hd.committed)
		switch {
		case errors.Is(hd.err, errLost):
			// The record moved: its answer is the outcome.
			if _, aerr := own.Authorize(context.WithoutCancel(ctx), unit, node, epoch); aerr != nil {
				return res, aerr
			}
			return res, hd.err
		case !errors.Is(hd.err, errDrained):
			if cause := context.Cause(rctx); cause != nil {
				return res, cause // the lock was lost
			}
			return res, hd.err
		case ctx.Err() != nil:
			return res, context.Cause(ctx)
		case !hd.once.lapsed:
			return res, nil
		}
	}
}

// DrainOptions are a drain by hand's settings. The zero value drains until
// the shard has no mail left and logs to slog.Default.
type DrainOptions struct {
	Max int // stop once Max messages were acknowledged (0: no bound)
	Log *slog.Logger
}

// handDrain is a holding's part in a drain by hand (Drain).
type handDrain struct {
	max        int // messages that may be acknowledged (0: no bound)
	acked      int
	deliveries int  // handler calls
	lapsed     bool // the holding ended because its lease ran out
	lock       *drain.UnitLock
	adopt      func() (*ownership.Lease, error) // the record read again
	// finished: the messages handled, to count those a commit covers.
	finished []finishedMsg
}

type finishedMsg struct {
	eid  string
	seq  uint64
	dead bool
}

// budget is how many more messages may be handed to the handler while
// inflight calls run (each hands out one message: batch): -1 for no
// bound. A call's slot is free before the holder's loop has settled its
// result, so the calls in flight count as acknowledged until they are.
func (d *handDrain) budget(inflight int) int {
	if d.max == 0 {
		return -1
	}
	return max(0, d.max-d.acked-inflight)
}

// over says whether the holding has no more to do: the bound reached, the
// lease run out, or every message of the shard read and done.
func (d *handDrain) over(h *holder, unread int) bool {
	switch {
	case h.inflight > 0:
		return false
	case d.budget(0) == 0:
		return true
	case !h.lease.Valid():
		d.lapsed = true
		return true
	}
	return h.b.idle() && unread == 0 && h.rd.Pending() == 0
}

// refence is asked when the broker refused a commit: if the drain still
// holds the shard's lock and the record still names this holding's node
// and epoch (its holder renewed, which rewrote it), the commits go on at
// the record's revision now. What this holding handed out, it handed out
// under that epoch, which no other holding of the shard ever has; and a
// drain that took the lock over rewrites the record only once this one's
// lock ran out (drain.Drainer.LockUnit).
func (d *handDrain) refence(h *holder) bool {
	if !d.lock.Held() {
		return false
	}
	l, err := d.adopt()
	if err != nil {
		return false
	}
	h.log.Info("commit refused: the record was renewed; committing at its new revision", "revision", l.Fence.Revision)
	h.fence = l.Fence
	return true
}

// record keeps the first message of q as handled.
func (d *handDrain) record(q *idq, dead bool) {
	e := q.msgs[0]
	if e.id == "" {
		return // an unroutable post moved aside: no id's message
	}
	if !dead {
		d.acked++
	}
	d.finished = append(d.finished, finishedMsg{eid: e.eid, seq: e.m.Sequence, dead: dead})
}

// count adds to res the messages handled that cursor c covers.
func (d *handDrain) count(res *drain.Result, c wire.ShardCursor) {
	for _, m := range d.finished {
		if !c.Committed(m.eid, m.seq) {
			continue
		}
		res.Count++
		if m.dead {
			res.DeadLettered++
		} else {
			res.Acked++
		}
	}
	res.Deliveries += d.deliveries
	res.Cursor = c.Seq
}
