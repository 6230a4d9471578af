package client

import (
	"context"
	"time"

	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/queue"
	"github.com/fencepost/fencepost/timer"
)

// Timers (docs/contract.md section 11): a send with WithAt or WithAfter
// enters the id's mailbox at that time, never before, and from then on is
// an ordinary message. World.Timers lists, counts and cancels the pending
// ones; a handler sets a reminder for its own id with
// World.Queue.Remind(ctx, m.Fence, m.ID, ...), fenced by its holding.

// WithAt makes a send a timer that enters the mailbox at t (queue.WithAt).
func WithAt(t time.Time) SendOption { return queue.WithAt(t) }

// WithAfter makes a send a timer that enters the mailbox d from now
// (queue.WithAfter).
func WithAfter(d time.Duration) SendOption { return queue.WithAfter(d) }

// WithTimerKey names a timer, so that a later send with the key replaces
// it and Timers.Cancel removes it (queue.WithTimerKey).
func WithTimerKey(key string) SendOption { return queue.WithTimerKey(key) }

// TimerStat is w.Timers.Stat, except that a user the server does not let
// read the timer stream (under fencepostd --auth, a role without its
// grants) is answered at once with *NotPermittedError (ErrNotPermitted),
// not at the timeout, and the refusal does not end the client's other
// operations (Refusable).
func (w *World) TimerStat(ctx context.Context, id string) (timer.Stat, error) {
	if w.refusals == nil {
		return w.Timers.Stat(ctx, id)
	}
	ctx, done := w.refusals.expect(ctx, jsapi.APIDirectGet+wire.TimerStream(w.Name))
	st, err := w.Timers.Stat(ctx, id)
	if np := done(); np != nil {
		return timer.Stat{}, np
	}
	return st, err
}
