package purge

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fencepost/fencepost/fencing"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/world"
)

// Purger purges the mailboxes of one world for fencepostd. Its methods
// run until their context ends (PurgeCommitted, FollowUnroutable) or make
// one pass (SweepUnroutable); each may run once at a time per world.
type Purger struct {
	world   string
	nc      *nats.Conn
	w       *world.World
	log     *slog.Logger
	metrics Observer
	retry   time.Duration // FollowUnroutable's retry of what it could not move
}

// New returns the purger of an open world.
func New(w *world.World, opts ...Option) (*Purger, error) {
	p := &Purger{world: w.Name, nc: handles.Of(w).JS.Conn(), w: w, log: slog.Default(), metrics: nopObserver{}, retry: defaultRetry}
	for _, o := range opts {
		if err := o(p); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// ErrInvalidOption wraps a bad option value (fencing.ErrInvalidOption,
// shared).
var ErrInvalidOption = fencing.ErrInvalidOption

// Option configures a Purger.
type Option func(*Purger) error

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option {
	return func(p *Purger) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", ErrInvalidOption)
		}
		p.log = l
		return nil
	}
}

// defaultRetry is how often FollowUnroutable tries again to move the
// unroutable messages it could not (WithRetry).
const defaultRetry = 10 * time.Second

// WithRetry sets how often FollowUnroutable tries again to move the
// unroutable messages it could not move aside (their store was full, the
// server refused): 10 s unless set.
func WithRetry(d time.Duration) Option {
	return func(p *Purger) error {
		if d <= 0 {
			return fmt.Errorf("%w: retry interval %v: give a positive duration", ErrInvalidOption, d)
		}
		p.retry = d
		return nil
	}
}

// Observer is told of the unroutable messages moved aside. Package
// metrics implements it for Prometheus (*metrics.Set).
type Observer interface {
	UnroutableMoved(world string, n int)
}

// WithMetrics tells o of this purger's outcomes (nil: nobody is told).
func WithMetrics(o Observer) Option {
	return func(p *Purger) error {
		if o != nil {
			p.metrics = o
		}
		return nil
	}
}

// nopObserver is the default Observer: it is told nothing.
type nopObserver struct{}

func (nopObserver) UnroutableMoved(string, int) {}

const (
	// readBatch is how many messages one direct get of an unroutable
	// subject asks for.
	readBatch = 1000
	// parallelPurges is how many purges of committed messages run at once.
	parallelPurges = 32
)
