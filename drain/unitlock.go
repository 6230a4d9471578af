package drain

import (
	"context"
	"time"
)

// UnitLock is the drain lock of a unit that is drained outside this
// package: a shard of a sharded world drained by hand (package shard),
// whose delivery is the shard engine's. It is the lock Drain takes for an
// id, under the unit's key (wire.LockKey), with the same rules: one drain
// of a unit at a time, renewed while it runs, taken over only when it
// lapsed or was taken under an older epoch.
type UnitLock struct {
	lk       *heldLock
	ctx      context.Context
	stop     context.CancelCauseFunc
	tookOver bool
}

// LockUnit takes unit's drain lock for node at epoch, as Drain does for an
// id before it reads anything. The holder check comes first and writes
// nothing when it refuses: *HeldError, *FreeError or *FencedError
// (package ownership's), and *ContendedError with Session set when the
// unit is held through a node lease session (its worker delivers it).
// *ContendedError when another drain holds the lock. A lock taken over
// from a drain that stopped without releasing it fences that drain's
// commits (ownership.Store.Touch) before LockUnit returns; TookOver says
// so, and what that drain read may have been handed out.
//
// The lock is renewed until Release, whatever becomes of ctx (which bounds
// LockUnit's own requests). Context ends when it is lost, with a
// *ContendedError (Lost) as its cause, or released.
func (d *Drainer) LockUnit(ctx context.Context, unit, node string, epoch uint64) (*UnitLock, error) {
	a := &authority{id: unit, node: node, epoch: epoch, ttl: d.cfg.DefaultTTL}
	if err := d.authorize(ctx, a); err != nil {
		return nil, err
	}
	if a.backed {
		return nil, &ContendedError{ID: unit, Node: node, Epoch: epoch, Session: true}
	}
	lk, takeover, err := d.acquire(ctx, a)
	if err != nil {
		return nil, err
	}
	l := &UnitLock{lk: lk, tookOver: takeover}
	l.ctx, l.stop = context.WithCancelCause(context.WithoutCancel(ctx))
	lk.keep(l.stop)
	if takeover {
		if _, err := d.own.Touch(ctx, unit, node, epoch); err != nil {
			l.Release(ctx, false)
			return nil, err
		}
	}
	return l, nil
}

// Context ends when the lock is lost (its cause a *ContendedError with
// Lost set) or released.
func (l *UnitLock) Context() context.Context { return l.ctx }

// Held says whether the lock is still this drain's by the local clock
// (its last renewal's authority has not run out, and it was not lost).
func (l *UnitLock) Held() bool { return l.ctx.Err() == nil && l.lk.check(l.ctx) == nil }

// TookOver says whether the lock was taken over from a drain that did not
// release it.
func (l *UnitLock) TookOver() bool { return l.tookOver }

// Release stops renewing the lock and deletes it if it is still this
// drain's. interrupted leaves it lapsed instead, so that the next drain
// takes it over at once and labels what it hands out as maybe seen
// before (a handler was interrupted, or a commit's outcome is unknown).
func (l *UnitLock) Release(ctx context.Context, interrupted bool) {
	l.lk.close()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	l.lk.release(cctx, interrupted)
	l.stop(nil)
}
