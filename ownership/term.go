package ownership

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/fencepost/fencepost/fencing"
)

// ErrRenewAgain is what a RenewFunc returns when its conditional write was
// refused but the lease is still the holder's at a newer revision (its own
// write whose answer was lost, or a rewrite on its behalf), which it
// adopted: the Term renews again at once.
var ErrRenewAgain = errors.New("ownership: lease still held at a newer revision; renew again")

// RenewFunc makes one renewal of a kept lease: one conditional write over
// the revision the holder wrote last, sent after start (taken before
// anything was sent). It returns the expiry the write stored; a
// fencing.Cause when the lease is gone (the Term self-fences with it);
// ErrRenewAgain (see there); any other error when nothing is known to be
// stored: the Term retries until the authority runs out. A Term never
// calls it twice at once.
type RenewFunc func(ctx context.Context, start time.Time) (expires time.Time, err error)

// TermConfig is a lease for KeepTerm to keep.
type TermConfig struct {
	// TTL is the term each renewal writes; the Term renews at TTL/3.
	TTL time.Duration
	// MaxSkew is the clock bound δ the lease's takers allow (a Store's
	// WithMaxSkew for its records, a Drainer's WithClockSkew for its drain
	// locks). The authority of a write whose term ends at expires, sent at
	// start, is expires - start less δ + 2ρ·span (ρ: the Store's drift).
	MaxSkew time.Duration
	// Start and Expires are the write that won the lease: when it was sent
	// and the expiry it stored.
	Start, Expires time.Time
	// Renew makes one renewal.
	Renew RenewFunc
	// OnFence, if set, runs once at a self-fence, before Done closes.
	OnFence func(fencing.Cause)
}

// Term is the one lease engine: it keeps a held lease alive by its
// RenewFunc with the keeper's rules (docs/design.md 4.1), whatever the
// lease is: an id's record and a node lease (Keeper, Session), a drain
// lock (package drain). It renews TTL/3 after the start of its last
// confirmed renewal, or half way to ValidUntil if that comes first;
// retries a renewal that failed without an answer every TTL/30 (2 ms..250
// ms), each attempt bounded by a third of the TTL and by ValidUntil; and
// self-fences when the authority runs out (a watchdog timer at ValidUntil,
// whatever is in flight) or when a renewal finds the lease gone. Then Done
// is closed, Context is cancelled with the fencing.Cause, and the state is
// terminal.
//
// Close stops renewing and leaves the lease to lapse; Done is then closed
// with Err() == ErrClosed.
type Term struct {
	ttl     time.Duration
	skew    time.Duration
	drift   float64
	renew   RenewFunc
	onFence func(fencing.Cause)

	mu         sync.Mutex
	lastStart  time.Time // start of the last confirmed renewal
	validUntil time.Time
	fencedAt   time.Time
	err        error
	renewals   uint64

	renewing sync.Mutex // one renewal at a time: the loop's or RenewNow's

	done     chan struct{}
	stop     chan struct{}
	ctx      context.Context
	cancel   context.CancelCauseFunc
	runCtx   context.Context // ends at Close: aborts a renewal in flight
	runStop  context.CancelFunc
	watchdog *time.Timer
	wg       sync.WaitGroup
	once     sync.Once
}

// KeepTerm starts keeping the lease c describes. The Term's clock rule
// is the Store's (its drift bound); c.MaxSkew is the lease's.
func (s *Store) KeepTerm(c TermConfig) *Term {
	return startTerm(c, s.drift, authorityOf(c.Expires, c.Start, c.MaxSkew, s.drift))
}

// startTerm starts a Term whose first authority ends at validUntil.
func startTerm(c TermConfig, drift float64, validUntil time.Time) *Term {
	t := &Term{
		ttl: c.TTL, skew: c.MaxSkew, drift: drift, renew: c.Renew, onFence: c.OnFence,
		lastStart: c.Start, validUntil: validUntil,
		done: make(chan struct{}), stop: make(chan struct{}),
	}
	t.ctx, t.cancel = context.WithCancelCause(context.Background())
	t.runCtx, t.runStop = context.WithCancel(t.ctx)
	// Armed only once assigned: an authority already over fires at once.
	t.watchdog = time.AfterFunc(time.Hour, t.checkWatchdog)
	t.watchdog.Reset(time.Until(t.validUntil))
	t.wg.Add(1)
	go t.run()
	return t
}

// authority is the local instant until which the writer of a lease with
// expiry expires may act, the write having been sent after start: the
// published span less the clock-bound margin δ + 2ρ·span (section 2,
// invariant 7).
func (t *Term) authority(expires, start time.Time) time.Time {
	return authorityOf(expires, start, t.skew, t.drift)
}

func authorityOf(expires, start time.Time, skew time.Duration, drift float64) time.Time {
	span := expires.Sub(start.Round(0))
	margin := skew + time.Duration(2*drift*float64(span))
	return start.Add(span - margin)
}

// Done is closed when the Term stops: self-fenced or closed.
func (t *Term) Done() <-chan struct{} { return t.done }

// Err is nil while the lease is kept; then the fencing.Cause of a
// self-fence, or ErrClosed.
func (t *Term) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}

// Cause is the self-fence cause, or "" when the Term was not fenced.
func (t *Term) Cause() fencing.Cause {
	c, _ := t.Err().(fencing.Cause)
	return c
}

// Context is cancelled when Done is closed; context.Cause gives Err.
func (t *Term) Context() context.Context { return t.ctx }

// Renewals counts the renewals confirmed so far.
func (t *Term) Renewals() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.renewals
}

// ValidUntil is the local instant the holder must stop acting by: that of
// the last confirmed renewal, or the moment of a self-fence if earlier.
func (t *Term) ValidUntil() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.fencedAt.IsZero() && t.fencedAt.Before(t.validUntil) {
		return t.fencedAt
	}
	return t.validUntil
}

// Valid says whether the holder may act now: not stopped, and before
// ValidUntil by the local clock (the watchdog may not have fired yet).
func (t *Term) Valid() bool {
	return t.Err() == nil && time.Now().Before(t.ValidUntil())
}

// Close stops renewing; the lease lapses at its expiry. It waits for the
// Term's goroutine, is idempotent and returns nil.
func (t *Term) Close() error {
	t.once.Do(func() {
		close(t.stop)
		t.runStop()
		t.wg.Wait()
		t.finish(ErrClosed, false)
	})
	return nil
}

// RenewNow renews at once, under the same rules as a scheduled renewal
// (after the loop's renewal in flight, if any): nil once a renewal is
// confirmed; the fencing.Cause if the Term is, or then becomes, fenced
// (nothing is sent once the authority ran out); ErrClosed after Close;
// otherwise the error of the last attempt, whose outcome is unknown. A
// holder calls it where it must prove, by a write, that the lease is still
// its own before it acts (a drain before a commit on a fence it read
// again: docs/design.md 3.5).
func (t *Term) RenewNow(ctx context.Context) error {
	var err error
	for range 3 {
		switch res := t.renewOnce(ctx, &err); res {
		case renewed:
			return nil
		case fenced:
			return t.Err()
		case retryLater:
			return err
		}
	}
	return err
}

// finish records the Term's end once: err, Done closed, Context
// cancelled. A self-fence also stamps fencedAt and runs OnFence.
func (t *Term) finish(err error, fenced bool) bool {
	t.mu.Lock()
	if t.err != nil {
		t.mu.Unlock()
		return false
	}
	t.err = err
	if fenced {
		t.fencedAt = time.Now()
	}
	t.mu.Unlock()
	t.watchdog.Stop()
	var c fencing.Cause
	if fenced && t.onFence != nil && errors.As(err, &c) {
		t.onFence(c) // before Done closes, so that whoever waits on Done sees it
	}
	t.cancel(err)
	close(t.done)
	return true
}

func (t *Term) fence(c fencing.Cause) { t.finish(c, true) }

// checkWatchdog runs at ValidUntil: unless a renewal moved it on
// meanwhile, the authority has run out.
func (t *Term) checkWatchdog() {
	t.mu.Lock()
	left := time.Until(t.validUntil)
	t.mu.Unlock()
	if left > 0 {
		t.watchdog.Reset(left)
		return
	}
	t.fence(fencing.CauseWatchdog)
}

// nextRenewal is ttl/3 after the start of the last renewal, or half way to
// the end of the authority if that comes first (a ttl close to the clock
// margin leaves less than ttl/3 of authority).
func (t *Term) nextRenewal() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	at := t.lastStart.Add(t.ttl / 3)
	if half := t.lastStart.Add(t.validUntil.Sub(t.lastStart) / 2); half.Before(at) {
		at = half
	}
	return at
}

// attemptDeadline bounds a renewal attempt started at start: a third of
// the ttl, or the authority vu if that comes first. An attempt whose
// request went to a stream leader that then died has no answer to wait
// for; bounded by the authority alone, it waited until the lease lapsed,
// and the holder self-fenced (a killed bucket leader, bench --cluster 3
// --kill-leaders). So it gives up in time for at least one more attempt,
// to the leader elected meanwhile. An attempt that gave up may still have
// been stored: the next is refused and the read that follows adopts it
// (Keeper.renew).
func (t *Term) attemptDeadline(start, vu time.Time) time.Time {
	if d := start.Add(max(t.ttl/3, minAttempt)); d.Before(vu) {
		return d
	}
	return vu
}

// minAttempt is the shortest bound of a renewal attempt (attemptDeadline).
const minAttempt = 100 * time.Millisecond

// retryEvery is the pause between failed renewal attempts.
func (t *Term) retryEvery() time.Duration {
	return min(max(t.ttl/30, 2*time.Millisecond), 250*time.Millisecond)
}

func (t *Term) run() {
	defer t.wg.Done()
	timer := time.NewTimer(0)
	defer timer.Stop()
	next := t.nextRenewal()
	for {
		timer.Reset(time.Until(next))
		select {
		case <-t.stop:
			return
		case <-t.done:
			return
		case <-timer.C:
		}
		var err error
		switch t.renewOnce(t.runCtx, &err) {
		case renewed:
			next = t.nextRenewal()
		case retryNow:
			next = time.Now()
		case retryLater:
			next = time.Now().Add(t.retryEvery())
		case fenced:
			return
		}
	}
}

type renewResult int

const (
	renewed renewResult = iota
	retryNow
	retryLater
	fenced
)

// renewOnce makes one renewal attempt, bounded by ValidUntil, and keeps
// what it confirmed. *errp is set to the error of an attempt whose outcome
// is unknown.
func (t *Term) renewOnce(ctx context.Context, errp *error) renewResult {
	t.renewing.Lock()
	defer t.renewing.Unlock()
	if err := t.Err(); err != nil {
		*errp = err
		if _, ok := err.(fencing.Cause); ok {
			return fenced
		}
		return retryLater
	}
	vu := t.ValidUntil()
	if !time.Now().Before(vu) {
		t.fence(fencing.CauseWatchdog)
		return fenced
	}
	start := time.Now()
	ctx, cancel := context.WithDeadline(ctx, t.attemptDeadline(start, vu))
	defer cancel()
	expires, err := t.renew(ctx, start)
	var c fencing.Cause
	switch {
	case err == nil:
		vu := t.authority(expires, start)
		t.mu.Lock()
		t.lastStart, t.renewals = start, t.renewals+1
		if vu.After(t.validUntil) {
			t.validUntil = vu
		}
		t.mu.Unlock()
		return renewed
	case errors.As(err, &c):
		t.fence(c)
		return fenced
	case errors.Is(err, ErrRenewAgain):
		return retryNow
	}
	*errp = err
	return retryLater
}
