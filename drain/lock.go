package drain

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/wire"
)

// heldLock is a drain lock this process holds: its value and the revision
// of the write that stored it. Every change is a compare-and-swap on that
// revision, so a lock is never written over a state its writer did not see.
type heldLock struct {
	d   *Drainer
	id  string
	key string

	mu    sync.Mutex
	val   wire.Lock
	rev   uint64
	until time.Time // local instant after which the holder stops committing
	lost  error     // set once the lock is known to be someone else's
}

// acquire takes id's drain lock for a. It creates the key when it is absent
// (never taken, or released), and takes over a present lock only when its
// term ran out by more than the skew bound, or when it was taken under an
// older epoch of the id than a's (its drain is a stale owner's: design.md
// 3.5), with a compare-and-swap on the exact revision it judged so.
// takeover reports the latter: the caller must then fence the previous
// holder (see fenceTakeover).
func (d *Drainer) acquire(ctx context.Context, a *authority) (l *heldLock, takeover bool, err error) {
	l = &heldLock{d: d, id: a.id, key: wire.LockKey(a.id)}
	start := time.Now()
	l.val = wire.Lock{Token: newToken(), Node: a.node, Epoch: a.epoch, Expires: start.Add(d.lockTTL)}
	data, err := wire.EncodeLock(l.val)
	if err != nil {
		return nil, false, err
	}
	// Most drains find no lock: try to create it first, and read only when
	// one is there.
	if l.rev, err = d.w.KV.Create(ctx, l.key, data); err == nil {
		l.until = start.Add(d.lockTTL - d.skew)
		return l, false, nil
	}
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return nil, false, err
	}
	e, err := d.w.KV.Get(ctx, l.key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		l.rev, err = d.w.KV.Create(ctx, l.key, data)
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
		if cur.Epoch >= a.epoch && time.Now().Before(cur.Expires.Add(d.skew)) {
			return nil, false, &ContendedError{ID: a.id, Node: cur.Node, Epoch: cur.Epoch, Expires: cur.Expires}
		}
		l.rev, err = d.w.KV.Update(ctx, l.key, data, e.Revision())
		takeover = true
	}
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return nil, false, &ContendedError{ID: a.id}
	}
	if err != nil {
		return nil, false, err
	}
	l.until = start.Add(d.lockTTL - d.skew)
	return l, takeover, nil
}

// check returns the error that must stop the drain, if any: the lock was
// lost, or its local term ran out and a renewal did not confirm it.
func (l *heldLock) check(ctx context.Context) error {
	if l == nil { // a Holding's drain: no lock (holding.go)
		return nil
	}
	l.mu.Lock()
	lost, fresh := l.lost, time.Now().Before(l.until)
	l.mu.Unlock()
	if lost != nil || fresh {
		return lost
	}
	return l.renew(ctx)
}

// renew extends the lock with a compare-and-swap on the revision this holder
// wrote last. A refused swap means the lock changed hands, unless the
// stored value still carries this drain's token (a renewal whose answer was
// lost did land): then the holder adopts that revision and tries again.
func (l *heldLock) renew(ctx context.Context) error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost != nil {
		return l.lost
	}
	for range 2 {
		start := time.Now()
		next := l.val
		next.Expires = start.Add(l.d.lockTTL)
		data, err := wire.EncodeLock(next)
		if err != nil {
			return err
		}
		rev, err := l.d.w.KV.Update(ctx, l.key, data, l.rev)
		if err == nil {
			l.val, l.rev, l.until = next, rev, start.Add(l.d.lockTTL-l.d.skew)
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return err // unknown: the next renewal finds out
		}
		m, gerr := jsapi.LeaderGet(ctx, l.d.nc, wire.BucketStream(l.d.world), jsapi.GetRequest{LastFor: wire.KeySubject(l.d.world, l.key)})
		if gerr != nil && !errors.Is(gerr, jsapi.ErrNotFound) {
			return gerr
		}
		if gerr == nil {
			if cur, derr := wire.DecodeLock(m.Data); derr == nil && cur.Token == l.val.Token {
				l.val, l.rev = cur, m.Sequence
				continue
			}
		}
		break
	}
	l.lost = &ContendedError{ID: l.id, Lost: true}
	return l.lost
}

// keep renews the lock at a third of its term until ctx ends; when the lock
// is lost it cancels the drain with that cause.
func (l *heldLock) keep(ctx context.Context, stop context.CancelCauseFunc) {
	if l == nil || l.d.noRenew {
		return
	}
	t := time.NewTicker(l.d.lockTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, l.d.lockTTL/3)
		err := l.renew(rctx)
		cancel()
		var ce *ContendedError
		if errors.As(err, &ce) && ce.Lost {
			stop(err)
			return
		}
		if err != nil && ctx.Err() == nil {
			l.d.log.Warn("drain lock renewal failed; retrying", "world", l.d.world, "id", l.id, "error", err)
		}
	}
}

// release deletes the lock if it is still this drain's (compare-and-swap on
// the revision). A lock that was lost is left alone.
func (l *heldLock) release(ctx context.Context) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost != nil {
		return
	}
	if err := l.d.w.KV.Delete(ctx, l.key, jetstream.LastRevision(l.rev)); err != nil {
		l.d.log.Debug("drain lock release", "world", l.d.world, "id", l.id, "error", err)
	}
	l.lost = &ContendedError{ID: l.id, Lost: true}
}

// newToken is a fresh random lock token (128 bits).
func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}
