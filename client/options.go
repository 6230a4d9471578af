package client

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fencepost/fencepost/fencing"
	"github.com/fencepost/fencepost/metrics"
	"github.com/fencepost/fencepost/ownership"
)

// ErrInvalidOption wraps a bad option value.
var ErrInvalidOption = fencing.ErrInvalidOption

// Option configures a Client.
type Option func(*options) error

type options struct {
	nats      []nats.Option
	timeout   time.Duration
	log       *slog.Logger
	ownership []ownership.Option
	metrics   *metrics.Set
}

// DefaultTimeout bounds every JetStream request whose context has no
// deadline.
const DefaultTimeout = 5 * time.Second

// WithTimeout sets the default request timeout.
func WithTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("%w: timeout %v must be positive", ErrInvalidOption, d)
		}
		o.timeout = d
		return nil
	}
}

// WithNATSOptions passes options to nats.Connect (credentials, TLS, name).
func WithNATSOptions(opts ...nats.Option) Option {
	return func(o *options) error {
		o.nats = append(o.nats, opts...)
		return nil
	}
}

// WithLogger sets the logger for the client and the stores it opens.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", ErrInvalidOption)
		}
		o.log = l
		return nil
	}
}

// WithMetrics records the operations of every world this client opens
// (claims, seizes, releases, renewals, self-fences, drains, dead letters,
// fenced commits) in m, for example metrics.Default.
func WithMetrics(m *metrics.Set) Option {
	return func(o *options) error {
		o.metrics = m
		return nil
	}
}

// WithOwnershipOptions passes options to every ownership store opened.
func WithOwnershipOptions(opts ...ownership.Option) Option {
	return func(o *options) error {
		o.ownership = append(o.ownership, opts...)
		return nil
	}
}
