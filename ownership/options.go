package ownership

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/fencepost/fencepost/metrics"
)

// ErrInvalidOption wraps a bad option value.
var ErrInvalidOption = errors.New("ownership: invalid option")

// Option configures a Store.
type Option func(*Store) error

// Clock bounds the lease arithmetic assumes (SPEC invariant 7; see
// docs/design.md "Clocks"): any two nodes' wall clocks differ by at most
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

// WithMetrics counts this store's won claims, seizes, releases and
// renewals, and its leases' self-fences, in m (nil: not counted).
func WithMetrics(m *metrics.Set) Option {
	return func(s *Store) error {
		s.metrics = m
		return nil
	}
}

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
