package timer

import (
	"context"
	"fmt"
	"time"

	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/wire"
)

// Stat is what a world, or one id, has of timers.
type Stat struct {
	// Pending: timers stored and not fired (nor cancelled).
	Pending uint64
	// Next: the earliest time among them (an id's Stat only; zero for
	// none).
	Next time.Time
	// Waiting: fired timers that the mailbox stream has not taken in yet,
	// and the time the oldest of them fired. They wait a moment as a
	// rule; longer while their mailbox is full (a full mailbox, or the
	// world at its max_bytes, holds back every fired timer of the world
	// until there is room: the source takes them in order).
	Waiting      uint64
	WaitingSince time.Time
	// Sourced: the timer stream's sequence up to which the mailbox stream
	// has taken every fired timer in.
	Sourced uint64
}

// Stat counts the timers of id, or of the world when id is "".
func (t *Timers) Stat(ctx context.Context, id string) (Stat, error) {
	h, err := t.streams()
	if err != nil {
		return Stat{}, err
	}
	filter, fired := wire.TimerFilter(t.w.Name), wire.FiredFilter(t.w.Name)
	if id != "" {
		if err := wire.ValidateID(id); err != nil {
			return Stat{}, err
		}
		filter, fired = wire.TimerIDFilter(t.w.Name, id), wire.FiredSubject(t.w.Name, id)
	}
	var st Stat
	if id != "" {
		// An id has few timers: read them, for the next one's time.
		all, err := t.read(ctx, h.JS.Conn(), filter)
		if err != nil {
			return Stat{}, err
		}
		st.Pending = uint64(len(all))
		for _, tm := range all {
			if st.Next.IsZero() || tm.At.Before(st.Next) {
				st.Next = tm.At
			}
		}
	} else if st.Pending, _, err = t.count(ctx, h, filter, 1); err != nil {
		return Stat{}, err
	}
	if st.Sourced, err = t.sourced(ctx, h); err != nil {
		return Stat{}, err
	}
	if st.Waiting, st.WaitingSince, err = t.count(ctx, h, fired, st.Sourced+1); err != nil {
		return Stat{}, err
	}
	return st, nil
}

// count is the number of messages on filter from sequence from on, and
// the time of the first.
func (t *Timers) count(ctx context.Context, h *handles.Handles, filter string, from uint64) (uint64, time.Time, error) {
	b, err := jsapi.DirectGet(ctx, h.JS.Conn(), wire.TimerStream(t.w.Name), jsapi.GetRequest{Seq: from, NextFor: filter, Batch: 1})
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("timer: count %s in world %q: %w", filter, t.w.Name, err)
	}
	if len(b.Msgs) == 0 {
		return 0, time.Time{}, nil
	}
	return 1 + b.Pending, b.Msgs[0].Time, nil
}

// sourced is the timer stream's sequence up to which the mailbox stream
// has stored every fired timer (its source's persisted sequence).
func (t *Timers) sourced(ctx context.Context, h *handles.Handles) (uint64, error) {
	info, err := h.Mailbox.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("timer: world %q: mailbox stream: %w", t.w.Name, err)
	}
	for _, s := range info.Sources {
		if s != nil && s.Name == wire.TimerStream(t.w.Name) {
			return s.Seq, nil
		}
	}
	return 0, nil
}

// Sweep removes the fired copies that the mailbox stream has taken in:
// the timer stream's fired subjects below the source's sequence. It is
// cleanup: a copy left costs space, never a second delivery (the source
// never goes back). fencepostd's purger is the place to run it; it
// returns how many copies it removed.
func (t *Timers) Sweep(ctx context.Context) (uint64, error) {
	h, err := t.streams()
	if err != nil {
		return 0, err
	}
	s, err := t.sourced(ctx, h)
	if err != nil || s == 0 {
		return 0, err
	}
	n, err := purge(ctx, h.JS.Conn(), wire.TimerStream(t.w.Name), wire.FiredFilter(t.w.Name), s+1)
	if err != nil {
		return 0, fmt.Errorf("timer: sweep world %q: %w", t.w.Name, err)
	}
	return n, nil
}
