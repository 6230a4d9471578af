package daemon

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/queue"
	"github.com/fencepost/fencepost/world"
)

// Reminder intents left by holders that stopped (queue.Remind, docs/wire.md
// "Reminders"): a holder's reminder is first an intent in the world's
// bucket, stored only while the holder held (fenced on its record), and
// then its schedule in the timer stream, which the holder writes at once.
// A holder that stopped in between left a committed intent without a
// schedule: fencepostd schedules every intent older than reminderGrace,
// with the holder's own queue.MaterialiseReminder (which writes a schedule
// at most once per intent and never over a newer one, so fencepostd and a
// slow holder may both run it).

// reminderGrace is how old an intent is (by its stored time) before
// fencepostd takes it for a leftover: a live holder schedules its own in
// milliseconds.
const reminderGrace = 2 * time.Second

// reminderTick is how often a world's follower looks at its pending
// intents; reminderRetry is the pause before an intent is tried again
// (a materialisation that failed, or one whose delete marker has not come
// back through the watch yet).
const (
	reminderTick  = 250 * time.Millisecond
	reminderRetry = 5 * time.Second
)

// followReminders follows w's reminder intents (a watch of the bucket's
// r.> keys, from the last of each) and materialises each once it is older
// than reminderGrace. It ends with the watch (a world removed); sweepLoop
// starts it again.
func (d *Daemon) followReminders(ctx context.Context, w *world.World) error {
	kv := handles.Of(w).KV
	if kv == nil || !handles.Of(w).Timers {
		<-ctx.Done() // no bucket at hand, or no timer stream: nothing to schedule
		return nil
	}
	watch, err := kv.Watch(ctx, wire.ReminderKeys)
	if err != nil {
		return err
	}
	defer func() { _ = watch.Stop() }()
	q := queue.New(w)
	type intent struct {
		e    jetstream.KeyValueEntry
		next time.Time // not tried before
	}
	pending := map[string]*intent{}
	t := time.NewTicker(reminderTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-watch.Updates():
			switch {
			case !ok:
				return errors.New("reminders: the watch of the bucket ended")
			case e == nil: // the intents stored before the watch are all in
			case e.Operation() == jetstream.KeyValuePut:
				pending[e.Key()] = &intent{e: e, next: e.Created().Add(reminderGrace)}
			default:
				delete(pending, e.Key())
			}
		case now := <-t.C:
			for key, in := range pending {
				if now.Before(in.next) {
					continue
				}
				in.next = now.Add(reminderRetry)
				p, err := q.MaterialiseReminder(ctx, key, in.e.Revision(), in.e.Value())
				switch {
				case errors.Is(err, wire.ErrCorruptRecord):
					d.log.Warn("reminders: an intent that is not one", "world", w.Name, "key", key, "err", err)
					delete(pending, key)
				case err != nil:
					d.log.Debug("reminders: schedule an intent left by its holder", "world", w.Name, "key", key, "err", err)
				default:
					d.log.Debug("reminders: scheduled an intent left by its holder", "world", w.Name, "id", p.ID, "key", p.Key, "at", p.At, "seq", p.Seq)
				}
			}
		}
	}
}
