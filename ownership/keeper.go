package ownership

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fencepost/fencepost/fencing"
	"github.com/fencepost/fencepost/internal/wire"
)

// ErrClosed is the Err of a Keeper (or Session, or Term) that was closed or
// released by its owner rather than fenced.
var ErrClosed = errors.New("ownership: lease keeper closed")

// Keeper keeps one held lease alive: it renews the record at ttl/3 with a
// conditional write on the revision it last wrote, and retries a failed
// renewal until the holder's authority (Lease.ValidUntil) would run out.
// Its schedule, retries, watchdog and self-fence are a Term's (the one
// lease engine, which also keeps drain locks); the Keeper adds the record:
// what a renewal writes and how a refused one is judged.
//
// When authority is lost it self-fences: Done is closed, Context is
// cancelled, and Cause names why:
//
//   - fencing.CauseWatchdog: no renewal was confirmed before ValidUntil
//     (the bucket was unreachable, or too slow);
//   - fencing.CauseRecordMissing: a renewal found the record deleted;
//   - fencing.CauseRecordMismatch: a renewal found the record replaced by
//     another writer (seized, released by someone else, or overwritten).
//
// A deletion or replacement is noticed at the next renewal, at most ttl/3
// after it happened; until then every commit the holder makes is already
// refused by the fence, since the record's revision moved on.
//
// Close stops renewing (the lease then lapses at its expiry) and Release
// stops and frees the record. Both close Done with Err() == ErrClosed. The
// fenced state is terminal: the way back is a new claim, with a new epoch.
type Keeper struct {
	s     *Store
	id    string // "" for a node lease
	node  string
	epoch uint64 // the kept holding's epoch: fixed
	ttl   time.Duration
	t     *Term

	// mu guards the record. A renewal stores it before its Term moves
	// ValidUntil on, and Lease reads ValidUntil before it: a Lease never
	// pairs a later authority with an earlier revision.
	mu  sync.Mutex
	rev uint64      // revision of our last write (or adopted read)
	rec wire.Record // record at rev
}

// Keep starts a Keeper for a lease won by Claim, Seize or Renew. A lease
// backed by a node lease (Session.Claim) is kept by its session instead.
func (s *Store) Keep(l *Lease) (*Keeper, error) {
	if l.backing != nil {
		return nil, fmt.Errorf("%w: %q is backed by the node lease of %q, which keeps it", ErrInvalidOption, l.ID, l.Node)
	}
	if l.rec.Epoch == 0 {
		return nil, fmt.Errorf("%w: the lease was not made by this package's Claim, Seize or Renew", ErrInvalidOption)
	}
	return s.newKeeper(l.ID, l.Node, l.TTL, view{rev: l.Revision, rec: l.rec}, l.validUntil, time.Now()), nil
}

// newKeeper starts keeping the record v (at id, or the node lease of node
// when id is ""), written with authority until validUntil.
func (s *Store) newKeeper(id, node string, ttl time.Duration, v view, validUntil, start time.Time) *Keeper {
	k := &Keeper{s: s, id: id, node: node, epoch: v.rec.Epoch, ttl: ttl, rev: v.rev, rec: v.rec}
	c := TermConfig{TTL: ttl, MaxSkew: s.skew, Start: start, Expires: v.rec.Expires, Renew: k.renew, OnFence: k.fenced}
	k.t = startTerm(c, s.drift, validUntil)
	return k
}

// Done is closed when the keeper stops: self-fenced, closed or released.
func (k *Keeper) Done() <-chan struct{} { return k.t.Done() }

// Err is nil while the lease is kept; then the fencing.Cause of a
// self-fence, or ErrClosed.
func (k *Keeper) Err() error { return k.t.Err() }

// Cause is the self-fence cause, or "" when the keeper was not fenced.
func (k *Keeper) Cause() fencing.Cause { return k.t.Cause() }

// Context is cancelled when Done is closed; context.Cause gives Err. Hand
// it to every piece of work done under the lease.
func (k *Keeper) Context() context.Context { return k.t.Context() }

// Renewals counts the renewals written so far.
func (k *Keeper) Renewals() uint64 { return k.t.Renewals() }

// ValidUntil is the local instant the holder must stop acting by: that of
// the last confirmed renewal, or the moment of a self-fence if earlier.
func (k *Keeper) ValidUntil() time.Time { return k.t.ValidUntil() }

// Lease is the current lease: its Fence.Revision changes with every
// renewal, so a commit fenced on it must use the latest. For a Session it
// is the node lease (Fence.ID is "").
func (k *Keeper) Lease() *Lease {
	vu := k.t.ValidUntil() // first: see Keeper.mu
	k.mu.Lock()
	defer k.mu.Unlock()
	return &Lease{
		Fence:      fencing.Fence{World: k.s.world, ID: k.id, Node: k.rec.Node, Epoch: k.rec.Epoch, Revision: k.rev},
		Expires:    k.rec.Expires,
		TTL:        k.ttl,
		validUntil: vu,
		rec:        k.rec,
	}
}

// Fence is the current fence (see Lease).
func (k *Keeper) Fence() fencing.Fence { return k.Lease().Fence }

func (k *Keeper) what() string {
	if k.id == "" {
		return fmt.Sprintf("node lease of %q", k.node)
	}
	return fmt.Sprintf("%q", k.id)
}

// Close stops renewing. The record stays; the lease lapses at its expiry.
// It is idempotent and returns nil.
func (k *Keeper) Close() error { return k.t.Close() }

// Release stops renewing and frees the record (the epoch stays). It
// returns the self-fence cause if the keeper was fenced, *FreeError if the
// authority had run out, and *FencedError if another writer changed the
// record meanwhile.
func (k *Keeper) Release(ctx context.Context) error {
	k.Close()
	err, valid := k.t.Err(), time.Now().Before(k.t.ValidUntil())
	k.mu.Lock()
	over := view{rev: k.rev, rec: k.rec}
	k.mu.Unlock()
	if c, ok := err.(fencing.Cause); ok {
		return c
	}
	if !valid {
		return &FreeError{ID: k.label(), LastEpoch: k.epoch}
	}
	for range 3 {
		free := over.rec
		free.State, free.Expires, free.NodeLease = wire.StateFree, time.Now(), 0
		_, err := k.write(ctx, "release", over, free)
		if !errors.Is(err, errConflict) {
			return err
		}
		v, err := k.read(ctx)
		if err != nil {
			return err
		}
		if !k.ours(v) {
			return &FencedError{ID: k.label(), Current: v.lastEpoch(), Holder: v.rec.Node}
		}
		over = v
	}
	return fmt.Errorf("%w: the %s kept changing during the release", ErrContended, k.what())
}

func (k *Keeper) label() string {
	if k.id == "" {
		return "node lease " + k.node
	}
	return k.id
}

// fenced is the Term's OnFence: counted and logged before Done closes.
func (k *Keeper) fenced(c fencing.Cause) {
	k.s.metrics.SelfFenced(k.s.world, string(c))
	k.s.log.Warn("self-fence", "cause", string(c), "world", k.s.world, "lease", k.label(), "node", k.node, "epoch", k.epoch)
}

// renew is the Keeper's RenewFunc: a conditional write over the revision
// the keeper holds, with expires = max(old expires, start + ttl); on a
// conflict a read that tells whether the record is still ours (adopt its
// revision, renew again), gone or replaced (self-fence).
func (k *Keeper) renew(ctx context.Context, start time.Time) (time.Time, error) {
	k.mu.Lock()
	over := view{rev: k.rev, rec: k.rec}
	k.mu.Unlock()
	rec := over.rec
	rec.TTLms = k.ttl.Milliseconds()
	if e := start.Round(0).Add(k.ttl); e.After(rec.Expires) {
		rec.Expires = e
	}
	v, err := k.write(ctx, "renew", over, rec)
	switch {
	case err == nil:
		k.mu.Lock()
		k.rev, k.rec = v.rev, rec
		k.mu.Unlock()
		return rec.Expires, nil
	case !errors.Is(err, errConflict):
		return time.Time{}, err // not stored (or unknown): the next attempt tells
	}
	v, err = k.read(ctx)
	switch {
	case errors.Is(err, wire.ErrCorruptRecord), errors.Is(err, wire.ErrUnknownVersion):
		return time.Time{}, fencing.CauseRecordMismatch
	case err != nil:
		return time.Time{}, err
	case !v.present():
		return time.Time{}, fencing.CauseRecordMissing
	case !k.ours(v):
		return time.Time{}, fencing.CauseRecordMismatch
	}
	// Still ours at a newer revision (our own write whose reply was lost,
	// or someone renewed on our behalf): adopt the revision, but not its
	// expiry - the authority only grows from a write this keeper timed.
	k.mu.Lock()
	k.rev, k.rec = v.rev, v.rec
	k.mu.Unlock()
	return time.Time{}, ErrRenewAgain
}

// ours reports whether v still names this holding.
func (k *Keeper) ours(v view) bool {
	return v.present() && v.rec.State == wire.StateHeld && v.rec.Node == k.node &&
		v.rec.Epoch == k.epoch && v.rec.NodeLease == k.nodeLease()
}

func (k *Keeper) nodeLease() uint64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.rec.NodeLease
}

func (k *Keeper) write(ctx context.Context, op string, over view, rec wire.Record) (view, error) {
	if k.id == "" {
		return k.s.writeNode(ctx, "node-"+op, k.node, over, rec)
	}
	return k.s.write(ctx, op, k.id, over, rec)
}

func (k *Keeper) read(ctx context.Context) (view, error) {
	if k.id == "" {
		return k.s.readNode(ctx, "node-read", k.node)
	}
	v, err := k.s.read(ctx, k.id)
	v.nl = nil // a kept id is never backed; compare the record alone
	return v, err
}
