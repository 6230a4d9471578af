package drain

import (
	"fmt"
	"log/slog"
	"time"
)

// Defaults of a Drainer.
const (
	DefaultBatch      = 1000
	DefaultLockTTL    = 30 * time.Second
	DefaultBackoffMin = 100 * time.Millisecond
	DefaultBackoffMax = 5 * time.Second
	// A drain commits what its handler acknowledged at the end of each
	// batch, and also within a batch every DefaultCommitEvery messages or
	// DefaultCommitInterval, whichever comes first: a crash then hands out
	// again at most that much of what was already handled.
	DefaultCommitEvery    = 100
	DefaultCommitInterval = time.Second
	maxBatch              = 10000
)

// Option configures a Drainer.
type Option func(*Drainer) error

// WithBatch sets how many messages one read fetches and one commit covers
// (1..10000, default 1000).
func WithBatch(n int) Option {
	return func(d *Drainer) error {
		if n < 1 || n > maxBatch {
			return fmt.Errorf("%w: batch %d is outside 1..%d", ErrInvalidOption, n, maxBatch)
		}
		d.batch = n
		return nil
	}
}

// WithLockTTL sets the drain lock's term (default 30s): a drain that stops
// renewing its lock (the process died) loses it after this long plus the
// clock skew bound. At least 10ms.
func WithLockTTL(ttl time.Duration) Option {
	return func(d *Drainer) error {
		if ttl < 10*time.Millisecond {
			return fmt.Errorf("%w: lock ttl %v is below 10ms", ErrInvalidOption, ttl)
		}
		d.lockTTL = ttl
		return nil
	}
}

// WithBackoff sets the wait before a failed message is delivered again:
// min after the first failure, doubling up to max.
func WithBackoff(min, max time.Duration) Option {
	return func(d *Drainer) error {
		if min < 0 || max < min {
			return fmt.Errorf("%w: backoff %v..%v (need 0 <= min <= max)", ErrInvalidOption, min, max)
		}
		d.backoffMin, d.backoffMax = min, max
		return nil
	}
}

// WithCommitEvery sets how often a drain commits within a batch: every n
// messages (n >= 1) or every d (d > 0), whichever comes first. A holding's
// Deliver (a worker's) owes such a commit to the holding's group commit,
// which sends it without waiting once no commit of the id is in flight.
func WithCommitEvery(n int, d time.Duration) Option {
	return func(dr *Drainer) error {
		if n < 1 || d <= 0 {
			return fmt.Errorf("%w: commit every %d messages or %v (need n >= 1, d > 0)", ErrInvalidOption, n, d)
		}
		dr.commitEvery, dr.commitInterval = n, d
		return nil
	}
}

// WithClockSkew sets the bound on the difference between two nodes' wall
// clocks (default ownership.DefaultMaxSkew). It only decides when a lease
// or a lock counts as lapsed (liveness), never whether a commit is stored.
func WithClockSkew(skew time.Duration) Option {
	return func(d *Drainer) error {
		if skew < 0 {
			return fmt.Errorf("%w: negative clock skew %v", ErrInvalidOption, skew)
		}
		d.skew = skew
		return nil
	}
}

// Observer is told of drain outcomes: drain durations, dead letters moved
// and failed, fenced commits. Package metrics implements it for
// Prometheus (*metrics.Set). (Unroutable messages moved aside are
// fencepostd's purger's: purge.Observer.)
type Observer interface {
	Drained(world string, d time.Duration)
	DeadLettered(world string, n int)
	DeadLetterFailed(world string)
	FencedCommit(world string)
}

// WithMetrics tells o of this drainer's outcomes (nil: nobody is told).
func WithMetrics(o Observer) Option {
	return func(d *Drainer) error {
		if o != nil {
			d.metrics = o
		}
		return nil
	}
}

// nopObserver is the default Observer: it is told nothing.
type nopObserver struct{}

func (nopObserver) Drained(string, time.Duration) {}
func (nopObserver) DeadLettered(string, int)      {}
func (nopObserver) DeadLetterFailed(string)       {}
func (nopObserver) FencedCommit(string)           {}

// Commit is a cursor write the broker stored, as an observer sees it.
type Commit struct {
	ID        string
	Node      string
	Epoch     uint64
	Revision  uint64 // the ownership record revision the write expected
	Cursor    uint64 // the cursor stored: the last message that left the mailbox
	StreamSeq uint64 // the bucket stream sequence of the stored cursor write
}

// WithCommitObserver calls fn after every commit the broker acknowledged,
// before the purge (the fault tests record every commit with it). fn runs
// on the drain's goroutine and must be quick.
func WithCommitObserver(fn func(Commit)) Option {
	return func(d *Drainer) error {
		d.onCommit = fn
		return nil
	}
}

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option {
	return func(d *Drainer) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", ErrInvalidOption)
		}
		d.log = l
		return nil
	}
}

// RunOption sets a property of one drain.
type RunOption func(*runOptions)

type runOptions struct {
	max   int  // messages to take out of the mailbox; 0 = all
	state bool // WithState (state.go)
}

// WithMax stops the drain once n messages left the mailbox (acknowledged or
// dead-lettered). n <= 0 means no limit.
func WithMax(n int) RunOption { return func(o *runOptions) { o.max = max(n, 0) } }
