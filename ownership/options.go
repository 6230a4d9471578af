package ownership

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/fencepost/fencepost/fencing"
)

// ErrInvalidOption wraps a bad option value.
var ErrInvalidOption = fencing.ErrInvalidOption

// Option configures a Store.
type Option func(*Store) error

// Clock bounds the lease arithmetic assumes (docs/contract.md and
// docs/design.md, invariant 7): any two nodes' wall clocks differ by at most
// DefaultMaxSkew, and any clock's rate is off by at most DefaultMaxDrift.
const (
	DefaultMaxSkew  = 100 * time.Millisecond
	DefaultMaxDrift = 0.001
)

// WithClockBounds sets the clock skew (delta) and rate error (rho) bounds the
// holder subtracts from its authority. Safety of commits never depends on
// them; they bound how early a holder stops acting on its own.
func WithClockBounds(skew time.Duration, drift float64) Option {
	return func(s *Store) error {
		if skew < 0 || drift < 0 || drift >= 0.1 {
			return fmt.Errorf("%w: clock bounds skew=%v drift=%v (need skew >= 0, 0 <= drift < 0.1)", ErrInvalidOption, skew, drift)
		}
		s.skew, s.drift = skew, drift
		return nil
	}
}

// Observer is told of this store's won claims, seizes, releases and
// renewals, and of its leases' self-fences. Package metrics implements it
// for Prometheus (*metrics.Set); ownership itself depends on no metrics
// library.
type Observer interface {
	Claimed(world string)
	Seized(world string)
	Released(world string)
	Renewed(world string)
	SelfFenced(world, cause string)
}

// WithMetrics tells o of this store's outcomes (nil: nobody is told).
func WithMetrics(o Observer) Option {
	return func(s *Store) error {
		if o != nil {
			s.metrics = o
		}
		return nil
	}
}

// nopObserver is the default Observer: it is told nothing.
type nopObserver struct{}

func (nopObserver) Claimed(string)            {}
func (nopObserver) Seized(string)             {}
func (nopObserver) Released(string)           {}
func (nopObserver) Renewed(string)            {}
func (nopObserver) SelfFenced(string, string) {}

// WithLogger sets the logger. At debug level every record read and write is
// logged with its outcome.
func WithLogger(l *slog.Logger) Option {
	return func(s *Store) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", ErrInvalidOption)
		}
		s.log = l
		return nil
	}
}

// ExpectRefusal returns a context that the server's refusal of a publish
// to subject ends at once, and done, which ends the expectation and
// returns that refusal (nil: there was none). NATS reports a refused
// publish asynchronously and the refused request gets no answer, so
// without it a refused write ends at its request timeout. Package client
// passes its connection's (the refusals it tracks, client.NotPermittedError).
type ExpectRefusal func(ctx context.Context, subject string) (context.Context, func() error)

// WithRefusals lets the store learn at once that the server refused it
// the retire of another node's lapsed node lease (a node owner under
// fencepostd --auth may write only its own, and fencepostd retires the
// others' as they lapse): the operation reads again at once, and again
// after short pauses, until the lease was retired, instead of waiting for
// the request's timeout.
func WithRefusals(f ExpectRefusal) Option {
	return func(s *Store) error {
		s.expectRefusal = f
		return nil
	}
}
