package daemon

import (
	"context"
	"time"

	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/world"
)

// sweepInterval is how often fencepostd looks for unroutable messages.
const sweepInterval = 10 * time.Second

// sweepLoop gives every unroutable message of every world a fate
// (drain.SweepUnroutable): a message a producer stored on a mailbox
// subject that no id encodes to is moved, with the reason, to the world's
// unroutable dead letters, logged at WARN and counted in the metrics. The
// first sweep runs at once, then one every sweepInterval.
func (d *Daemon) sweepLoop(ctx context.Context) error {
	t := time.NewTicker(sweepInterval)
	defer t.Stop()
	for {
		d.sweep(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// drainer is fencepostd's drainer of world w (for its purger and sweep):
// its logger, its metrics.
func (d *Daemon) drainer(w *world.World) (*drain.Drainer, error) {
	own, err := ownership.New(w, ownership.WithLogger(d.log))
	if err != nil {
		return nil, err
	}
	return drain.New(w, own, drain.WithLogger(d.log), drain.WithMetrics(d.metrics))
}

func (d *Daemon) sweep(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*sweepInterval)
	defer cancel()
	names, err := world.List(ctx, d.js)
	if err != nil {
		d.log.Debug("sweep: list worlds", "err", err)
		return
	}
	for _, name := range names {
		w, err := world.Open(ctx, d.js, name)
		if err != nil {
			continue
		}
		dr, err := d.drainer(w)
		if err != nil {
			continue
		}
		if _, err := dr.SweepUnroutable(ctx); err != nil && ctx.Err() == nil {
			d.log.Warn("sweep of unroutable messages failed; retrying later", "world", name, "err", err)
		}
	}
}
