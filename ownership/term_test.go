package ownership_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/fencing"
	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// calls records a RenewFunc's calls: when each started and the deadline
// of the context it was given.
type calls struct {
	mu        sync.Mutex
	starts    []time.Time
	deadlines []time.Time
}

func (c *calls) add(ctx context.Context, start time.Time) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	dl, _ := ctx.Deadline()
	c.starts, c.deadlines = append(c.starts, start), append(c.deadlines, dl)
	return len(c.starts)
}

func (c *calls) n() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.starts)
}

func (c *calls) get() (starts, deadlines []time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Time(nil), c.starts...), append([]time.Time(nil), c.deadlines...)
}

// TestTerm_Rules: the lease engine's rules (docs/design.md 4.1), driven by
// RenewFuncs that answer as a renewal can, on a Store of a real world:
// the schedule, the deadline of each attempt, adoption, retries, the
// watchdog, a self-fence with the renewal's cause, RenewNow and Close.
func TestTerm_Rules(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{})
	s := w.Ownership
	const skew = 10 * time.Millisecond

	t.Run("renews at a third of the term, each attempt bounded by the authority", func(t *testing.T) {
		const ttl = 600 * time.Millisecond
		var c calls
		start := time.Now()
		term := s.KeepTerm(ownership.TermConfig{TTL: ttl, MaxSkew: skew, Start: start, Expires: start.Add(ttl),
			Renew: func(ctx context.Context, at time.Time) (time.Time, error) {
				c.add(ctx, at)
				return at.Add(ttl), nil
			}})
		defer term.Close()
		testutil.WaitFor(t, 10*time.Second, "3 renewals or an end", func() bool { return term.Renewals() >= 3 || term.Err() != nil })
		require.NoError(t, term.Err())
		starts, deadlines := c.get()
		prev := start
		for i, at := range starts {
			require.GreaterOrEqual(t, at.Sub(prev), ttl/3, "renewal %d came before a third of the term", i)
			require.False(t, deadlines[i].IsZero(), "renewal %d had no deadline", i)
			require.LessOrEqual(t, deadlines[i].Sub(prev), ttl-skew, "renewal %d could be sent after the authority", i)
			prev = at
		}
		require.True(t, term.ValidUntil().After(start.Add(ttl)), "the authority moved on with the renewals")
	})

	t.Run("a renewal refused but still ours is made again at once", func(t *testing.T) {
		const ttl = 3 * time.Second
		var c calls
		start := time.Now()
		term := s.KeepTerm(ownership.TermConfig{TTL: ttl, MaxSkew: skew, Start: start, Expires: start.Add(ttl),
			Renew: func(ctx context.Context, at time.Time) (time.Time, error) {
				if c.add(ctx, at) == 1 {
					return time.Time{}, ownership.ErrRenewAgain
				}
				return at.Add(ttl), nil
			}})
		defer term.Close()
		testutil.WaitFor(t, 10*time.Second, "a renewal", func() bool { return term.Renewals() >= 1 })
		starts, _ := c.get()
		require.Less(t, starts[1].Sub(starts[0]), ttl/3, "the second attempt waited for the next period")
	})

	t.Run("a renewal never answered gives up in time for another", func(t *testing.T) {
		// A request to a stream leader that died is never answered: the
		// attempt must end before the authority does, so that the next,
		// to the leader elected meanwhile, keeps the lease.
		const ttl = 900 * time.Millisecond
		var c calls
		start := time.Now()
		term := s.KeepTerm(ownership.TermConfig{TTL: ttl, MaxSkew: skew, Start: start, Expires: start.Add(ttl),
			Renew: func(ctx context.Context, at time.Time) (time.Time, error) {
				if c.add(ctx, at) == 1 {
					<-ctx.Done()
					return time.Time{}, ctx.Err()
				}
				return at.Add(ttl), nil
			}})
		defer term.Close()
		testutil.WaitFor(t, 10*time.Second, "a renewal or an end", func() bool { return term.Renewals() >= 1 || term.Err() != nil })
		require.NoError(t, term.Err(), "the unanswered attempt held on until the lease lapsed")
		starts, deadlines := c.get()
		require.LessOrEqual(t, deadlines[0].Sub(starts[0]), ttl/3+time.Millisecond, "the first attempt's bound")
	})

	t.Run("a lease found gone self-fences with the renewal's cause", func(t *testing.T) {
		const ttl = 300 * time.Millisecond
		start := time.Now()
		var onFence []fencing.Cause
		var kept atomic.Pointer[ownership.Term]
		term := s.KeepTerm(ownership.TermConfig{TTL: ttl, MaxSkew: skew, Start: start, Expires: start.Add(ttl),
			Renew: func(context.Context, time.Time) (time.Time, error) {
				return time.Time{}, fencing.CauseRecordMismatch
			},
			OnFence: func(c fencing.Cause) {
				if tm := kept.Load(); tm != nil {
					select {
					case <-tm.Done():
						t.Error("OnFence ran after Done closed")
					default:
					}
				}
				onFence = append(onFence, c)
			}})
		kept.Store(term) // the first renewal comes a third of the term later
		defer term.Close()
		waitDone(t, term.Done(), 5*time.Second)
		require.Equal(t, fencing.CauseRecordMismatch, term.Cause())
		require.ErrorIs(t, context.Cause(term.Context()), fencing.CauseRecordMismatch)
		require.Equal(t, []fencing.Cause{fencing.CauseRecordMismatch}, onFence)
		require.False(t, term.Valid())
		require.False(t, term.ValidUntil().After(time.Now()), "ValidUntil is capped at the fence")
		require.ErrorIs(t, term.RenewNow(context.Background()), fencing.CauseRecordMismatch, "terminal")
	})

	t.Run("renewals without an answer are retried, then the watchdog fences", func(t *testing.T) {
		const ttl = 300 * time.Millisecond
		var c calls
		start := time.Now()
		term := s.KeepTerm(ownership.TermConfig{TTL: ttl, MaxSkew: skew, Start: start, Expires: start.Add(ttl),
			Renew: func(ctx context.Context, at time.Time) (time.Time, error) {
				c.add(ctx, at)
				return time.Time{}, errors.New("no answer")
			}})
		defer term.Close()
		first := term.ValidUntil()
		at := waitDone(t, term.Done(), 5*time.Second)
		require.Equal(t, fencing.CauseWatchdog, term.Cause())
		require.False(t, at.Before(first), "fenced before the authority ran out")
		require.GreaterOrEqual(t, c.n(), 2, "a failed renewal was not retried")
		starts, deadlines := c.get()
		for i := range starts {
			require.False(t, deadlines[i].After(first), "attempt %d could run past the authority", i)
		}
	})

	t.Run("the watchdog fires while a renewal hangs", func(t *testing.T) {
		const ttl = 300 * time.Millisecond
		start := time.Now()
		hung := make(chan struct{})
		var once sync.Once
		term := s.KeepTerm(ownership.TermConfig{TTL: ttl, MaxSkew: skew, Start: start, Expires: start.Add(ttl),
			Renew: func(ctx context.Context, _ time.Time) (time.Time, error) {
				once.Do(func() { close(hung) })
				<-ctx.Done()
				return time.Time{}, ctx.Err()
			}})
		defer term.Close()
		first := term.ValidUntil()
		<-hung
		at := waitDone(t, term.Done(), 5*time.Second)
		require.Equal(t, fencing.CauseWatchdog, term.Cause())
		require.False(t, at.Before(first))
	})

	t.Run("RenewNow writes at once; Close stops and is idempotent", func(t *testing.T) {
		const ttl = 30 * time.Second // no scheduled renewal during the test
		var c calls
		start := time.Now()
		term := s.KeepTerm(ownership.TermConfig{TTL: ttl, MaxSkew: skew, Start: start, Expires: start.Add(ttl),
			Renew: func(ctx context.Context, at time.Time) (time.Time, error) {
				c.add(ctx, at)
				return at.Add(ttl), nil
			}})
		before := term.ValidUntil()
		require.NoError(t, term.RenewNow(context.Background()))
		require.Equal(t, 1, c.n())
		require.Equal(t, uint64(1), term.Renewals())
		require.True(t, term.ValidUntil().After(before))
		require.NoError(t, term.Close())
		require.NoError(t, term.Close())
		waitDone(t, term.Done(), time.Second)
		require.ErrorIs(t, term.Err(), ownership.ErrClosed)
		require.Empty(t, term.Cause())
		require.ErrorIs(t, term.RenewNow(context.Background()), ownership.ErrClosed)
		require.Equal(t, 1, c.n(), "renewed after Close")
	})
}
