package daemon

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencepost/fencepost/metrics"
	"github.com/fencepost/fencepost/purge"
	"github.com/fencepost/fencepost/timer"
	"github.com/fencepost/fencepost/world"
)

// purgeScan is how often the purge loop looks for worlds.
const purgeScan = 2 * time.Second

// sweepTimers removes the world's fired timers that its mailbox stream has
// taken in (timer.Timers.Sweep): cleanup of the timer stream, every
// purgeScan. A world without a timer stream (made before timers) has
// nothing to sweep.
func (d *Daemon) sweepTimers(ctx context.Context, w *world.World) {
	n, err := timer.New(w).Sweep(ctx)
	switch {
	case err != nil:
		d.log.Debug("timers: sweep", "world", w.Name, "err", err)
	case n > 0:
		d.log.Debug("timers: fired copies swept", "world", w.Name, "count", n)
	}
}

// purgeLoop runs a purger (purge.Purger.PurgeCommitted) for every world whose
// config says purge=server, the worlds fencepostd --auth creates: their
// owners may not call the purge API, so the server removes what their
// commits cover (docs/security.md). It looks for new, removed and
// re-created worlds every purgeScan.
func (d *Daemon) purgeLoop(ctx context.Context) error {
	type purger struct {
		created time.Time // of the bucket stream: a re-created world gets a new purger
		stop    context.CancelFunc
		done    chan struct{}
	}
	running := map[string]*purger{}
	// The purger's refusals are counted on the registry /metrics serves,
	// when it is one that takes registrations (metrics.Registry is).
	var pm *metrics.Purger
	if reg, ok := d.gather.(prometheus.Registerer); ok {
		pm = metrics.NewPurger(reg)
	}
	defer func() {
		for _, p := range running {
			p.stop()
			<-p.done
		}
	}()
	t := time.NewTicker(purgeScan)
	defer t.Stop()
	for {
		names, err := world.List(ctx, d.js)
		if err != nil {
			d.log.Debug("purger: list worlds", "err", err)
		}
		seen := map[string]bool{}
		for _, name := range names {
			w, err := world.Open(ctx, d.js, name)
			if err != nil {
				continue
			}
			d.sweepTimers(ctx, w)
			if w.Config.Purge != world.PurgeByServer {
				continue
			}
			created := w.Created()
			seen[name] = true
			if p := running[name]; p != nil {
				select {
				case <-p.done: // ended (its watch failed): start again
				default:
					if p.created.Equal(created) {
						continue
					}
					p.stop()
					<-p.done
				}
			}
			pg, err := d.purgerOf(w)
			if err != nil {
				continue
			}
			pctx, stop := context.WithCancel(ctx)
			p := &purger{created: created, stop: stop, done: make(chan struct{})}
			running[name] = p
			go func() {
				defer close(p.done)
				d.log.Info("purger: removing committed messages for the owners", "world", name)
				refused := purge.OnRefusal(func(r purge.Refusal) {
					switch r {
					case purge.RefusedBadKey:
						pm.BadCursorKey(name)
					case purge.RefusedForged:
						pm.ForgedCursor(name)
					}
				})
				opts := []purge.PurgeOption{refused}
				if name == d.cfg.World && d.verdicts != nil {
					// The auditor knows who wrote each cursor of its
					// world: nothing is purged below one it has not
					// judged genuine (cursors.go).
					opts = append(opts, purge.WithJudge(d.verdicts.genuine))
				}
				if err := pg.PurgeCommitted(pctx, opts...); err != nil {
					d.log.Warn("purger stopped; restarting", "world", name, "err", err)
				}
			}()
		}
		if err == nil {
			for name, p := range running {
				if !seen[name] {
					p.stop()
					<-p.done
					delete(running, name)
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
