package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alecthomas/kong"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/queue"
	"github.com/fencepost/fencepost/timer"
	"github.com/fencepost/fencepost/world"
)

// Timers on the command line (docs/contract.md section 11): send --at
// TIME or --after DURATION sets one (scheduled key=K at=T timer_seq=N),
// ls --scheduled and timer ls list the pending ones, timer cancel ID KEY
// removes one before it fires, stat counts them, timer sweep removes the
// fired copies the mailboxes took in.

func init() {
	register("timer", &command{
		usage: "timer ls [ID] [--limit N] [--after ID] | timer cancel ID KEY | timer sweep",
		short: "pending timers: list them (timer ... per timer, then listed count=K), cancel one before it fires (cancelled count=1|0), remove fired copies (swept count=N)",
		examples: []string{
			"fencepost timer ls                       # timer id=order-42 key=remind at=... due_in=29m59s ... per timer, then listed count=K more=false",
			"fencepost timer ls order-42              # the timers of one id",
			"fencepost timer cancel order-42 remind   # cancelled count=1: it will not fire; count=0: none pending under that key (fired, cancelled, never set)",
			"fencepost timer sweep                    # swept count=N: the fired timers the mailboxes took in, removed from the timer stream",
		},
		flags: &timerFlags,
		run:   runTimer,
	})
}

var timerFlags struct {
	Limit limitValue `name:"limit" placeholder:"N" default:"${ls_limit}" help:"ls: print about N timers, whole ids (a cut list ends with more next=ID)"`
	After idValue    `name:"after" placeholder:"ID" help:"ls: resume after this id (the next= of the page before)"`
}

func runTimer(e *env, args []string) int {
	if len(args) == 0 {
		return e.usageErr("timer", "want ls, cancel or sweep")
	}
	switch sub, rest := args[0], args[1:]; {
	case sub == "ls" && len(rest) <= 1:
		id := ""
		if len(rest) == 1 {
			if err := wire.ValidateID(rest[0]); err != nil {
				return e.usageErr("timer", "%v", err)
			}
			id = rest[0]
		}
		return e.listTimers(timer.ListOptions{ID: id, Limit: int(timerFlags.Limit), After: string(timerFlags.After)})
	case sub == "cancel" && len(rest) == 2:
		return runTimerCancel(e, rest[0], rest[1])
	case sub == "sweep" && len(rest) == 0:
		return e.worldOp(func(ctx context.Context, w *client.World) int {
			n, err := w.Timers.Sweep(ctx)
			if err != nil {
				return e.fail(err)
			}
			e.emit("swept", f("count", n))
			return exitOK
		})
	}
	return e.usageErr("timer", "want ls [ID], cancel ID KEY or sweep, got %q", args)
}

// runTimerCancel removes id's pending timer key: cancelled count=1 (it
// will not fire), or count=0 (none pending under that key).
func runTimerCancel(e *env, id, key string) int {
	if err := wire.ValidateID(id); err != nil {
		return e.usageErr("timer", "%v", err)
	}
	if err := wire.ValidateAnyTimerKey(key); err != nil {
		return e.usageErr("timer", "%v", err)
	}
	return e.worldOp(func(ctx context.Context, w *client.World) int {
		ok, err := w.Timers.Cancel(ctx, id, key)
		if err != nil {
			return e.fail(err)
		}
		n := 0
		if ok {
			n = 1
		}
		e.emit("cancelled", f("count", n))
		return exitOK
	})
}

// runLsScheduled is ls --scheduled: the world's pending timers.
func runLsScheduled(e *env) int {
	if lsFlags.HeldBy != "" || lsFlags.WithMail || lsFlags.Dead || lsFlags.Shards {
		return e.usageErr("ls", "--scheduled lists timers; --held-by, --with-mail, --dead and --shards filter ids and shards")
	}
	return e.listTimers(timer.ListOptions{Limit: int(lsFlags.Limit), After: string(lsFlags.After)})
}

// listTimers prints one `timer` line per pending timer, sorted by id and
// key, then `listed` (exit 0):
//
//	timer id=order-42 key=remind at=2026-05-01T09:00:00Z due_in=29m59.2s from=shop size=13 timer_seq=7
//	listed count=1 more=false
//
// due_in is 0s for a timer whose time has come (it is firing). Pages are
// of whole ids: more=true next=ID, and --after ID gives the next page.
func (e *env) listTimers(o timer.ListOptions) int {
	return e.worldOp(func(ctx context.Context, w *client.World) int {
		page, err := w.Timers.List(ctx, o)
		if err != nil {
			return e.fail(err)
		}
		now := time.Now()
		for _, tm := range page.Timers {
			fields := []field{f("id", tm.ID), f("key", tm.Key), f("at", tm.At), f("due_in", ageOf(now, tm.At))}
			if tm.From != "" {
				fields = append(fields, f("from", tm.From))
			}
			if tm.MsgKey != "" {
				fields = append(fields, f("msg_id", tm.MsgKey))
			}
			fields = append(fields, f("size", tm.Size), f("timer_seq", tm.Seq))
			e.emit("timer", fields...)
		}
		fields := []field{f("count", len(page.Timers)), f("more", page.More)}
		if page.More {
			fields = append(fields, f("next", page.Next))
		}
		e.emit("listed", fields...)
		return exitOK
	})
}

// sendTimerOpts are the send's timer options from --at, --after and
// --key; a bad combination is a usage error (exit 2), nothing sent.
func (e *env) sendTimerOpts() ([]queue.SendOption, int) {
	at, after, key := e.given["at"], e.given["after"], e.given["key"]
	switch {
	case at && after:
		return nil, e.usageErr("send", "give --at or --after, not both")
	case key && !at && !after:
		return nil, e.usageErr("send", "--key names a timer: give --at or --after with it")
	case !at && !after:
		return nil, exitOK
	}
	var opts []queue.SendOption
	if at {
		opts = append(opts, queue.WithAt(time.Time(sendFlags.At)))
	} else {
		opts = append(opts, queue.WithAfter(time.Duration(sendFlags.After)))
	}
	if key {
		if err := wire.ValidateTimerKey(sendFlags.Key); err != nil {
			return nil, e.usageErr("send", "--key: %v", err)
		}
		opts = append(opts, queue.WithTimerKey(sendFlags.Key))
	}
	return opts, exitOK
}

// timerStatFields are stat's timer fields: for the world, timers (pending)
// and timers_waiting (fired, not yet in their mailboxes: a full mailbox
// holds them back) with timers_waiting_since; for an id, timers and
// next_timer. None for a world without timers, or a user the server does
// not let read them (fencepostd --auth); timers_error when the read
// failed otherwise.
func (e *env) timerStatFields(ctx context.Context, w *client.World, id string) []field {
	if !w.AllowsTimers() {
		return nil
	}
	st, err := w.TimerStat(ctx, id)
	switch {
	case errors.Is(err, client.ErrNotPermitted), errors.Is(err, world.ErrNoTimers):
		return nil
	case err != nil:
		return []field{f("timers_error", err.Error())}
	}
	fields := []field{f("timers", st.Pending)}
	if !st.Next.IsZero() {
		fields = append(fields, f("next_timer", st.Next))
	}
	if id == "" || st.Waiting > 0 {
		fields = append(fields, f("timers_waiting", st.Waiting))
	}
	if st.Waiting > 0 {
		fields = append(fields, f("timers_waiting_since", st.WaitingSince))
	}
	return fields
}

// atValue is send's --at: an RFC 3339 time.
type atValue time.Time

func (v *atValue) Decode(ctx *kong.DecodeContext) error {
	s, err := popString(ctx, "time")
	if err != nil {
		return err
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return fmt.Errorf("want an RFC 3339 time such as 2026-05-01T09:00:00Z or 2026-05-01T11:00:00+02:00: %v", err)
	}
	*v = atValue(t)
	return nil
}

// afterValue is send's --after: a positive duration.
type afterValue time.Duration

func (v *afterValue) Decode(ctx *kong.DecodeContext) error {
	s, err := popString(ctx, "duration")
	if err != nil {
		return err
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return fmt.Errorf("want a positive duration such as 90s or 2h, got %q", s)
	}
	*v = afterValue(d)
	return nil
}
