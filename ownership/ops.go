package ownership

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencepost/fencepost/internal/wire"
)

// maxAttempts bounds the read-and-write rounds of claim, release and renew
// when other writers keep changing the record.
const maxAttempts = 64

// decision is one operation's rule: from a view of the record and the time,
// either the record to write over that view, or the outcome that refuses.
type decision func(v view, now time.Time) (*wire.Record, error)

// How run picks the view of its first round.
type firstView int

const (
	freshRead  firstView = iota // read the record
	cachedView                  // the last view this store saw, else read
	// cachedOrAbsent: the last view this store saw, else assume the id
	// was never written (a create: one round trip for a new id).
	cachedOrAbsent
)

// run carries out a decision with conditional writes only. The first round
// may decide on an assumed view (see firstView); a write over a wrong
// assumption fails and costs a fresh read, and every refusal run returns
// comes from a fresh read. With single, a lost write is ErrContended
// instead of a new round.
func (s *Store) run(ctx context.Context, op, id string, first firstView, single bool, decide decision) (view, time.Time, error) {
	var v view
	cached := false
	switch first {
	case cachedView:
		v, cached = s.cache.get(id)
	case cachedOrAbsent:
		v, _ = s.cache.get(id)
		cached = true // a miss leaves v as the zero view: never written
	}
	refusedRetires, wait := 0, retireFirstPause
	confirms, confirmWait := 0, time.Millisecond
	// tried are this call's writes refused as conflicts: one may have been
	// stored after all (storedAfterAll's read may be a deposed leader's).
	var tried []triedWrite
	for attempt := 1; ; attempt++ {
		if !cached {
			var err error
			if v, err = s.read(ctx, id); err != nil {
				return view{}, time.Time{}, unknownIfTried(op, id, tried, err)
			}
		}
		start := time.Now()
		next, refusal := decide(v, start.Round(0))
		if refusal != nil {
			if cached {
				cached = false
				continue
			}
			// A refusal is a read: on a replicated world, confirm it.
			ok, err := s.confirm(ctx, id, v)
			if err != nil {
				return view{}, start, unknownIfTried(op, id, tried, err)
			}
			if !ok {
				if confirms++; confirms >= maxConfirms {
					return view{}, start, unknownIfTried(op, id, tried, fmt.Errorf("%w: the record of %q moved under %d reads in a row during the %s", ErrNotConfirmed, id, confirms, op))
				}
				if err := pause(ctx, confirmWait); err != nil {
					return view{}, start, unknownIfTried(op, id, tried, err)
				}
				confirmWait = min(2*confirmWait, 50*time.Millisecond)
				attempt--
				continue
			}
			if mine, at, ok := s.ownWrite(ctx, op, id, v, tried); ok {
				return mine, at, nil
			}
			if s.debugOn(ctx) {
				s.debug(ctx, op, id, "outcome", refusal)
			}
			return view{}, start, refusal
		}
		nv, err := s.retireThenWrite(ctx, op, id, v, start.Round(0), *next)
		var rr *retireRefusedError
		if errors.As(err, &rr) && refusedRetires < retireTries {
			// Not this user's to retire: whoever may (fencepostd) does it
			// as the lease lapses. Read again, not counted as contention.
			refusedRetires++
			if refusedRetires > 1 {
				if err := pause(ctx, wait); err != nil {
					return view{}, start, err
				}
				wait = min(2*wait, retireMaxPause)
			}
			attempt--
			cached = false
			continue
		}
		if !errors.Is(err, errConflict) {
			return nv, start, err
		}
		if !sameWrite(v.rec, *next) {
			tried = append(tried, triedWrite{rec: *next, start: start, over: v})
		}
		fresh, mine, rerr := s.storedAfterAll(ctx, op, id, v, *next)
		if rerr != nil {
			return view{}, start, unknownIfTried(op, id, tried, rerr)
		}
		if mine {
			return fresh, start, nil
		}
		if single {
			// A replicated stream's leader also refuses (10164) while an
			// earlier write to the record is still in flight, though the
			// record did not change. Only a change is contention: on the
			// same revision, the same decision is written again.
			if fresh.rev == v.rev && attempt < maxAttempts {
				v, cached = fresh, true
				if err := pause(ctx, time.Millisecond); err != nil {
					return view{}, start, unknownIfTried(op, id, tried, err)
				}
				continue
			}
			return view{}, start, fmt.Errorf("%w: the record of %q changed during the %s; decide again", ErrContended, id, op)
		}
		if attempt >= maxAttempts {
			return view{}, start, fmt.Errorf("%w: the record of %q changed %d times during the %s", ErrContended, id, attempt, op)
		}
		// Decide again on what storedAfterAll read (a refusal reads again).
		v, cached = fresh, true
	}
}

// storedAfterAll reads the record after a write of rec over v was refused
// as a conflict, returns what it read, and says whether the record stored
// is rec after all: a publish the client sent again after its first
// answer was lost (the first stored, the second refused), or a deposed
// stream leader that got the publish too and answered first from its
// stale state while the real leader stored it, turns a stored write into
// a refusal (the partition scenarios of the fault suite saw a claim
// answer held-by naming its own caller, and a forced seize answer
// contended). The read is confirmed (confirm): a deposed leader's read
// would not show the write. rec is this call's own: a new epoch, or the
// same epoch with a term that starts at this call's clock reading, so no
// other write stores the same record; unless rec changes nothing of v's
// (then any write could have stored it, and it is not taken for this
// call's). An error: the read could not be confirmed.
func (s *Store) storedAfterAll(ctx context.Context, op, id string, v view, rec wire.Record) (view, bool, error) {
	fresh, err := s.readConfirmed(ctx, id)
	if err != nil {
		return view{}, false, err
	}
	if sameWrite(v.rec, rec) || !fresh.present() || !sameWrite(fresh.rec, rec) {
		return fresh, false, nil
	}
	s.count(op)
	if !rec.Backed() {
		s.cache.put(id, fresh)
	}
	if s.debugOn(ctx) {
		s.debug(ctx, op, id, "outcome", "written (the refusal was of a second copy)", "rev", fresh.rev)
	}
	return fresh, true, nil
}

// triedWrite is a write of a call refused as a conflict, and when it was
// sent.
type triedWrite struct {
	rec   wire.Record
	start time.Time
	over  view // the view it was written over
}

// unknownIfTried is err, or, when the call has writes refused as
// conflicts (tried) that may have been stored after all (storedAfterAll),
// an *UnknownError: the call ends without a read that shows whether one
// of them was.
func unknownIfTried(op, id string, tried []triedWrite, err error) error {
	if len(tried) == 0 {
		return err
	}
	return &UnknownError{Op: op, ID: id, Err: fmt.Errorf("a write refused as a conflict may have been stored, and no confirmed read came after it: %w", err)}
}

// ownWrite says whether v, a confirmed read that a refusal would be
// decided on, is one of the call's own writes that were refused as
// conflicts (tried): stored after all, as storedAfterAll says, its read
// having come from a leader that did not have it yet. Each is this call's
// own (a new epoch, or a term from this call's clock reading), so no
// other write stores the same record.
func (s *Store) ownWrite(ctx context.Context, op, id string, v view, tried []triedWrite) (view, time.Time, bool) {
	if !v.present() {
		return view{}, time.Time{}, false
	}
	for _, w := range tried {
		if !sameWrite(v.rec, w.rec) {
			continue
		}
		s.count(op)
		if !w.rec.Backed() {
			s.cache.put(id, v)
		}
		if s.debugOn(ctx) {
			s.debug(ctx, op, id, "outcome", "written (found at a confirmed read after its refusal)", "rev", v.rev)
		}
		v.tookOver = w.over.present() && w.over.rec.State == wire.StateHeld
		return v, w.start, true
	}
	return view{}, time.Time{}, false
}

// sameWrite says whether two records say the same.
func sameWrite(a, b wire.Record) bool {
	return a.Node == b.Node && a.Epoch == b.Epoch && a.State == b.State && a.TTLms == b.TTLms &&
		a.Acquired.Equal(b.Acquired) && a.Expires.Equal(b.Expires) && a.NodeLease == b.NodeLease
}

func (s *Store) checkIDNode(id, node string) error {
	if err := wire.ValidateID(id); err != nil {
		return err
	}
	return wire.ValidateNode(node)
}

func held(node string, epoch uint64, ttl time.Duration, now time.Time) *wire.Record {
	return &wire.Record{
		Node: node, Epoch: epoch, State: wire.StateHeld, TTLms: ttl.Milliseconds(),
		Acquired: now, Expires: now.Add(ttl),
	}
}

// Claim takes a free id (never owned, released, or lapsed) for node for ttl
// (0 means the world's default). It returns the lease, or *HeldError when a
// live lease exists - also when the caller holds it, or ErrEpochsExhausted
// when the record is at the last epoch (nothing is written). Of any number
// of concurrent claimers exactly one wins.
func (s *Store) Claim(ctx context.Context, id, node string, ttl time.Duration) (*Lease, error) {
	ttl, err := s.checkOwnerArgs(id, node, ttl)
	if err != nil {
		return nil, err
	}
	v, start, err := s.claim(ctx, id, func(epoch uint64, now time.Time) (*wire.Record, error) {
		return held(node, epoch, ttl, now), nil
	})
	if err != nil {
		return nil, err
	}
	return s.lease(id, v, start, ttl), nil
}

// recordFor makes the record a claim or seize writes at epoch: a lease of
// its own (Store) or one backed by a node lease (Session).
type recordFor func(epoch uint64, now time.Time) (*wire.Record, error)

// claim is the rule of every claim: a free id (never owned, released or
// lapsed) gets rec's record at the next epoch; a live one is *HeldError.
func (s *Store) claim(ctx context.Context, id string, rec recordFor) (view, time.Time, error) {
	var over view
	nv, start, err := s.run(ctx, "claim", id, cachedOrAbsent, false, func(v view, now time.Time) (*wire.Record, error) {
		if v.live(now) {
			return nil, &HeldError{ID: id, Node: v.rec.Node, Epoch: v.rec.Epoch, Expires: v.expires()}
		}
		if err := v.exhausted(fmt.Sprintf("%q", id)); err != nil {
			return nil, err
		}
		over = v
		return rec(v.nextEpoch(), now)
	})
	nv.tookOver = err == nil && (nv.tookOver || over.present() && over.rec.State == wire.StateHeld)
	return nv, start, err
}

// seize is the rule of every seize: with force, the force key first
// (forceAuthority); then an owned id that lapsed, or any owned id with
// force, gets rec's record at the next epoch. A free id is *FreeError, a
// live one without force *LiveError. One attempt.
func (s *Store) seize(ctx context.Context, id, node string, ttl time.Duration, force bool, rec recordFor) (view, time.Time, error) {
	if force {
		if err := s.forceAuthority(ctx, id, node, ttl); err != nil {
			return view{}, time.Time{}, err
		}
	}
	nv, start, err := s.run(ctx, "seize", id, freshRead, true, func(v view, now time.Time) (*wire.Record, error) {
		if !v.present() || v.rec.State == wire.StateFree {
			return nil, &FreeError{ID: id, LastEpoch: v.lastEpoch()}
		}
		if v.live(now) && !force {
			return nil, &LiveError{ID: id, Node: v.rec.Node, Epoch: v.rec.Epoch, Expires: v.expires()}
		}
		if err := v.exhausted(fmt.Sprintf("%q", id)); err != nil {
			return nil, err
		}
		return rec(v.rec.Epoch+1, now)
	})
	nv.tookOver = err == nil // a seize always writes over a holder
	return nv, start, err
}

// Owner is the routing probe: the live holder of id, or Held=false with the
// last epoch. On a replicated world the read is confirmed by a read barrier
// (one bucket write) before it answers; when it cannot be, the error wraps
// ErrNotConfirmed.
func (s *Store) Owner(ctx context.Context, id string) (Status, error) {
	if err := wire.ValidateID(id); err != nil {
		return Status{}, err
	}
	v, err := s.readConfirmed(ctx, id)
	if err != nil {
		return Status{}, err
	}
	return s.status(id, v, time.Now()), nil
}

// Release frees id if node holds a live lease on it; the record keeps its
// epoch. Otherwise *NotOwnerError (someone else holds it) or *FreeError (no
// live lease; an expired owner cannot release). A refusal writes nothing.
func (s *Store) Release(ctx context.Context, id, node string) error {
	if err := s.checkIDNode(id, node); err != nil {
		return err
	}
	_, _, err := s.run(ctx, "release", id, cachedView, false, func(v view, now time.Time) (*wire.Record, error) {
		if !v.live(now) {
			return nil, &FreeError{ID: id, LastEpoch: v.lastEpoch()}
		}
		if v.rec.Node != node {
			return nil, &NotOwnerError{ID: id, Holder: v.rec.Node, Epoch: v.rec.Epoch}
		}
		r := v.rec
		r.State, r.Expires, r.NodeLease = wire.StateFree, now, 0
		return &r, nil
	})
	return err
}

// Guard checks that node still holds id at epoch with a live lease. It
// returns the record's status, or *FencedError (another node or epoch is on
// the record) or *FreeError (no live lease). It is a read: use a fenced
// write (fencing.Fence.Expect) where the check must hold at the write. On
// a replicated world the read is confirmed as Owner's is.
func (s *Store) Guard(ctx context.Context, id, node string, epoch uint64) (Status, error) {
	if err := s.checkIDNode(id, node); err != nil {
		return Status{}, err
	}
	v, err := s.readConfirmed(ctx, id)
	if err != nil {
		return Status{}, err
	}
	now := time.Now()
	switch {
	case !v.live(now):
		return Status{}, &FreeError{ID: id, LastEpoch: v.lastEpoch()}
	case v.rec.Node != node || v.rec.Epoch != epoch:
		return Status{}, &FencedError{ID: id, Current: v.rec.Epoch, Holder: v.rec.Node}
	}
	return s.status(id, v, now), nil
}

// Renew extends node's live lease on id to now+ttl; a renewal never shortens
// the term. Otherwise *HeldError (someone else holds it) or *FreeError (no
// live lease, including the caller's own lapsed one: the way back is Claim,
// with a new epoch).
func (s *Store) Renew(ctx context.Context, id, node string, ttl time.Duration) (*Lease, error) {
	ttl, err := s.checkOwnerArgs(id, node, ttl)
	if err != nil {
		return nil, err
	}
	v, start, err := s.run(ctx, "renew", id, cachedView, false, func(v view, now time.Time) (*wire.Record, error) {
		if !v.live(now) {
			return nil, &FreeError{ID: id, LastEpoch: v.lastEpoch()}
		}
		if v.rec.Node != node {
			return nil, &HeldError{ID: id, Node: v.rec.Node, Epoch: v.rec.Epoch, Expires: v.expires()}
		}
		if v.rec.Backed() {
			return nil, &BackedError{ID: id, Node: v.rec.Node, NodeLease: v.rec.NodeLease}
		}
		r := v.rec
		r.TTLms = ttl.Milliseconds()
		if e := now.Add(ttl); e.After(r.Expires) {
			r.Expires = e
		}
		return &r, nil
	})
	if err != nil {
		return nil, err
	}
	return s.lease(id, v, start, ttl), nil
}

// Seize takes over an owned id whose lease lapsed, or a live one with force,
// with a new epoch. Otherwise *FreeError (nobody owns it: use Claim),
// *LiveError (live holder, no force), ErrEpochsExhausted (the record is at
// the last epoch; nothing is written) or ErrContended (the record changed
// between this call's read and its write; decide again). It makes a single
// attempt.
func (s *Store) Seize(ctx context.Context, id, node string, ttl time.Duration, force bool) (*Lease, error) {
	ttl, err := s.checkOwnerArgs(id, node, ttl)
	if err != nil {
		return nil, err
	}
	v, start, err := s.seize(ctx, id, node, ttl, force, func(epoch uint64, now time.Time) (*wire.Record, error) {
		return held(node, epoch, ttl, now), nil
	})
	if err != nil {
		return nil, err
	}
	return s.lease(id, v, start, ttl), nil
}

// forceAuthority writes the force key of id (wire.ForceKey) before a
// forced seize touches the record: who forces, when, for how long. Subject
// permissions cannot tell a forced seize from a claim (both are the same
// conditional write on the record), but they can refuse this key, which
// only the operator role may write (docs/security.md). Without that
// permission the server refuses this write and the seize stops here,
// before the record. The key is also the audit trail of the last forced
// seize of each id.
func (s *Store) forceAuthority(ctx context.Context, id, node string, ttl time.Duration) error {
	body, err := wire.EncodeForce(node, time.Now(), ttl)
	if err != nil {
		return err
	}
	if _, err := s.kv.Put(ctx, wire.ForceKey(id), body); err != nil {
		return fmt.Errorf("ownership: forced seize of %q: write its force key (operator only): %w", id, err)
	}
	return nil
}

func (s *Store) checkOwnerArgs(id, node string, ttl time.Duration) (time.Duration, error) {
	if err := s.checkIDNode(id, node); err != nil {
		return 0, err
	}
	return s.cfg.TTL(ttl)
}

func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
