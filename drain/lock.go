package drain

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/fencing"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/ownership"
)

// heldLock is a drain lock this process holds: its value and the revision
// of the write that stored it. Every change is a compare-and-swap on that
// revision, so a lock is never written over a state its writer did not see.
// It is kept alive by an ownership.Term, the engine that keeps id and node
// leases too (docs/design.md 3.5, 4.1): the same schedule, retries,
// watchdog and self-fence; the lock adds what a renewal writes.
type heldLock struct {
	d   *Drainer
	id  string
	key string

	mu    sync.Mutex
	val   wire.Lock
	rev   uint64
	start time.Time // when the write that won the lock was sent

	term *ownership.Term // from keep on
}

// acquire takes id's drain lock for a. It creates the key when it is absent
// (never taken, or released), and takes over a present lock only when its
// term ran out by more than the skew bound, or when it was taken under an
// older epoch of the id than a's (its drain is a stale owner's: design.md
// 3.5), with a compare-and-swap on the exact revision it judged so.
// takeover reports the latter: the caller must then fence the previous
// holder (see fenceTakeover). The lock is renewed once keep starts.
func (d *Drainer) acquire(ctx context.Context, a *authority) (l *heldLock, takeover bool, err error) {
	l = &heldLock{d: d, id: a.id, key: wire.LockKey(a.id), start: time.Now()}
	l.val = wire.Lock{Token: newToken(), Node: a.node, Epoch: a.epoch, Expires: l.start.Add(d.lockTTL)}
	data, err := wire.EncodeLock(l.val)
	if err != nil {
		return nil, false, err
	}
	// Most drains find no lock: try to create it first, and read only when
	// one is there.
	if l.rev, err = handles.Of(d.w).KV.Create(ctx, l.key, data); err == nil {
		return l, false, nil
	}
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return nil, false, err
	}
	e, err := handles.Of(d.w).KV.Get(ctx, l.key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		l.rev, err = handles.Of(d.w).KV.Create(ctx, l.key, data)
	case err != nil:
		return nil, false, err
	default:
		cur, derr := wire.DecodeLock(e.Value())
		if derr != nil {
			return nil, false, derr
		}
		// A lock of an older epoch is a stale owner's, live or not: the
		// caller's epoch was stored by a write of the record after that
		// drain read it, so the fence refuses every commit it sends. Waiting
		// for its term would only add it to every crash takeover's gap.
		now := time.Now()
		overlong := d.maxLockTerm() > 0 && cur.Expires.After(now.Add(d.maxLockTerm()))
		if overlong {
			d.log.Warn("drain: a drain lock with a term above the world's max ttl, which no drain writes, taken over", "world", d.world, "id", a.id, "node", cur.Node, "epoch", cur.Epoch, "expires", cur.Expires)
		}
		if cur.Epoch >= a.epoch && now.Before(cur.Expires.Add(d.skew)) && !overlong {
			return nil, false, &ContendedError{ID: a.id, Node: cur.Node, Epoch: cur.Epoch, Expires: cur.Expires}
		}
		l.rev, err = handles.Of(d.w).KV.Update(ctx, l.key, data, e.Revision())
		takeover = true
	}
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return nil, false, &ContendedError{ID: a.id}
	}
	if err != nil {
		return nil, false, err
	}
	return l, takeover, nil
}

// keep starts renewing the lock (ownership.Term: at a third of its term,
// with the keeper's retries and watchdog). When the Term self-fences (the
// lock changed hands, or no renewal was confirmed within its authority)
// it stops the drain with *ContendedError{Lost: true}.
func (l *heldLock) keep(stop context.CancelCauseFunc) {
	l.term = l.d.own.KeepTerm(ownership.TermConfig{
		TTL: l.d.lockTTL, MaxSkew: l.d.skew, Start: l.start, Expires: l.val.Expires,
		Renew: l.renewOnce,
		OnFence: func(c fencing.Cause) {
			l.d.log.Warn("drain lock self-fence; the drain stops", "world", l.d.world, "id", l.id, "cause", string(c))
			stop(l.lost())
		},
	})
}

func (l *heldLock) lost() error { return &ContendedError{ID: l.id, Lost: true} }

// check returns the error that must stop the drain before a commit, if
// any: the lock was lost, or its authority ran out (the Term's watchdog
// fences it then, if it has not yet).
func (l *heldLock) check(context.Context) error {
	if l == nil { // a Holding's drain: no lock (holding.go)
		return nil
	}
	if !l.term.Valid() {
		return l.lost()
	}
	return nil
}

// renew renews the lock now, by a compare-and-swap (ownership.Term.RenewNow):
// nil once stored, *ContendedError{Lost: true} when the lock changed hands
// or its authority ran out, another error when the outcome is unknown.
func (l *heldLock) renew(ctx context.Context) error {
	if l == nil {
		return nil
	}
	err := l.term.RenewNow(ctx)
	var c fencing.Cause
	if errors.As(err, &c) || errors.Is(err, ownership.ErrClosed) {
		return l.lost()
	}
	return err
}

// errRenewalPaused is a renewal a test paused (PauseLockRenewal).
var errRenewalPaused = errors.New("drain: lock renewal paused")

// renewOnce is the lock's ownership.RenewFunc: a compare-and-swap on the
// revision this holder wrote last. A refused swap means the lock changed
// hands (fencing.CauseRecordMismatch, or CauseRecordMissing when it is
// gone), unless the stored value still carries this drain's token (a
// renewal whose answer was lost did land): then the holder adopts that
// revision and renews again (ownership.ErrRenewAgain).
func (l *heldLock) renewOnce(ctx context.Context, start time.Time) (time.Time, error) {
	if l.d.noRenew {
		return time.Time{}, errRenewalPaused
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	next := l.val
	next.Expires = start.Add(l.d.lockTTL)
	data, err := wire.EncodeLock(next)
	if err != nil {
		return time.Time{}, err
	}
	rev, err := handles.Of(l.d.w).KV.Update(ctx, l.key, data, l.rev)
	if err == nil {
		l.val, l.rev = next, rev
		return next.Expires, nil
	}
	if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) && !errors.Is(err, jetstream.ErrKeyNotFound) {
		l.d.log.Debug("drain lock renewal failed; retrying", "world", l.d.world, "id", l.id, "error", err)
		return time.Time{}, err // unknown: the next attempt finds out
	}
	m, err := jsapi.LeaderGet(ctx, l.d.nc, wire.BucketStream(l.d.world), jsapi.GetRequest{LastFor: wire.KeySubject(l.d.world, l.key)})
	switch {
	case errors.Is(err, jsapi.ErrNotFound):
		return time.Time{}, fencing.CauseRecordMissing
	case err != nil:
		return time.Time{}, err
	case jsapi.IsMarker(m.Header):
		return time.Time{}, fencing.CauseRecordMissing
	}
	if cur, derr := wire.DecodeLock(m.Data); derr == nil && cur.Token == l.val.Token {
		l.val, l.rev = cur, m.Sequence
		return time.Time{}, ownership.ErrRenewAgain
	}
	return time.Time{}, fencing.CauseRecordMismatch
}

// close stops renewing the lock; it stays until release, or lapses.
func (l *heldLock) close() {
	if l != nil && l.term != nil {
		l.term.Close()
	}
}

// release stops renewing and deletes the lock if it is still this drain's
// (compare-and-swap on the revision). A lock a renewal found changed or
// gone is left alone; one whose renewals went unanswered (the watchdog)
// is deleted if it is still at the revision this drain wrote. lapsed: the
// lock is written lapsed instead (expired by more than the skew bound),
// so that the next drain takes it over at once and knows it does.
func (l *heldLock) release(ctx context.Context, lapsed bool) {
	if l == nil {
		return
	}
	l.close()
	if l.term != nil && l.term.Cause() != "" && l.term.Cause() != fencing.CauseWatchdog {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if lapsed {
		v := l.val
		v.Expires = time.Now().Add(-2 * l.d.skew)
		if data, err := wire.EncodeLock(v); err == nil {
			if _, err := handles.Of(l.d.w).KV.Update(ctx, l.key, data, l.rev); err != nil {
				l.d.log.Debug("drain lock left lapsed", "world", l.d.world, "id", l.id, "error", err)
			}
		}
		return
	}
	if err := handles.Of(l.d.w).KV.Delete(ctx, l.key, jetstream.LastRevision(l.rev)); err != nil {
		l.d.log.Debug("drain lock release", "world", l.d.world, "id", l.id, "error", err)
	}
}

// newToken is a fresh random lock token (128 bits).
func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}
