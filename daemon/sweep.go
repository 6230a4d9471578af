package daemon

import (
	"context"
	"fmt"
	"time"

	"github.com/fencepost/fencepost/purge"
	"github.com/fencepost/fencepost/world"
)

// sweepInterval is how often fencepostd looks for new worlds to follow
// for unroutable messages.
const sweepInterval = 10 * time.Second

// sweepLoop gives every unroutable message of every world a fate
// (purge.Purger.FollowUnroutable): a message a producer stored on a mailbox
// subject that no id encodes to is moved, with the reason, to the world's
// unroutable dead letters, logged at WARN and counted in the metrics. Each
// world has one follower, which reads the headers of every message posted
// (from the stream's first message on, at each start); the worlds are
// listed every sweepInterval, and a follower that stopped (its world
// removed, an error) is started again at the next listing.
func (d *Daemon) sweepLoop(ctx context.Context) error {
	t := time.NewTicker(sweepInterval)
	defer t.Stop()
	running := map[string]follower{}
	reminders := map[string]follower{} // reminders.go
	for {
		d.follow(ctx, running, d.followUnroutable)
		d.follow(ctx, reminders, d.followReminders)
		select {
		case <-ctx.Done():
			for _, f := range running {
				<-f.done
			}
			for _, f := range reminders {
				<-f.done
			}
			return nil
		case <-t.C:
		}
	}
}

// follower is a world's follower of unroutable messages.
type follower struct {
	stop context.CancelFunc
	done chan struct{} // closed when it ended
}

// purgerOf is fencepostd's purger of world w (for the purge loop and the
// unroutable followers): its logger, its metrics.
func (d *Daemon) purgerOf(w *world.World) (*purge.Purger, error) {
	return purge.New(w, purge.WithLogger(d.log), purge.WithMetrics(d.metrics))
}

// follow starts a follower (run: of unroutable messages, of reminder
// intents) for every world that has none running, and stops the follower
// of a world no longer listed (a world removed and added again is followed
// from its first message).
func (d *Daemon) follow(ctx context.Context, running map[string]follower, run func(context.Context, *world.World) error) {
	for name, f := range running {
		select {
		case <-f.done:
			delete(running, name)
		default:
		}
	}
	lctx, cancel := context.WithTimeout(ctx, sweepInterval)
	defer cancel()
	names, err := world.List(lctx, d.js)
	if err != nil {
		d.log.Debug("sweep: list worlds", "err", err)
		return
	}
	listed := map[string]bool{}
	for _, name := range names {
		listed[name] = true
	}
	for name, f := range running {
		if !listed[name] {
			f.stop()
			<-f.done
			delete(running, name)
		}
	}
	for _, name := range names {
		if _, ok := running[name]; ok {
			continue
		}
		w, err := world.Open(lctx, d.js, name)
		if err != nil {
			continue
		}
		fctx, stop := context.WithCancel(ctx)
		f := follower{stop: stop, done: make(chan struct{})}
		running[name] = f
		go func() {
			defer close(f.done)
			defer stop()
			if err := run(fctx, w); err != nil && fctx.Err() == nil {
				d.log.Warn("following a world stopped; starting again later", "world", name, "err", err)
			}
		}()
	}
}

// followUnroutable is the follower of w's unroutable messages.
func (d *Daemon) followUnroutable(ctx context.Context, w *world.World) error {
	pg, err := d.purgerOf(w)
	if err != nil {
		return fmt.Errorf("unroutable messages: %w", err)
	}
	if err := pg.FollowUnroutable(ctx); err != nil {
		return fmt.Errorf("unroutable messages: %w", err)
	}
	return nil
}
