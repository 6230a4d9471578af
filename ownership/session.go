package ownership

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/fencepost/fencepost/fencing"
	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/wire"
)

// Session is a node lease (docs/design.md 4.2): one record per node, under
// wire.NodeKey(node), renewed at ttl/3 by a Keeper. Every id claimed
// through the session names the session's epoch in its record and is live
// exactly as long as the node lease is live at that epoch, so a node
// holding any number of ids writes one record per renewal period, and the
// lapse or release of the node lease frees all of its ids at once.
//
// A session's epoch never repeats (same rule as an id's), so an id claimed
// under an earlier session of the same node is never revived by a later
// one. When the session self-fences, Done closes and every id lease it
// backs is invalid (Lease.Valid reports false). Run the work done under the
// session's ids (drains, handlers) with Context(), so that it stops at the
// fence.
//
// As etcd's concurrency.Session: Close releases the node lease (every id
// it backs is free at once), Orphan stops renewing it (its ids lapse with
// it, as if the process had died). Claims and seizes through the session
// follow exactly Store's rules (Store.Claim, Store.Seize), force key
// included.
type Session struct {
	k      *Keeper
	closed sync.Once
	err    error // of the first Close
}

// OpenSession takes the node lease of node for ttl (0: the world default).
// It returns *HeldError (ID "node lease N") when a live node lease of that
// node exists, for instance that of a previous process not yet lapsed.
func (s *Store) OpenSession(ctx context.Context, node string, ttl time.Duration) (*Session, error) {
	if err := wire.ValidateNode(node); err != nil {
		return nil, err
	}
	ttl, err := s.cfg.TTL(ttl)
	if err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		v, err := s.readNode(ctx, "node-read", node)
		if err != nil {
			return nil, err
		}
		start := time.Now()
		now := start.Round(0)
		if v.live(now) {
			return nil, &HeldError{ID: "node lease " + node, Node: v.rec.Node, Epoch: v.rec.Epoch, Expires: v.rec.Expires}
		}
		if err := v.exhausted("node lease " + node); err != nil {
			return nil, err
		}
		rec := held(node, v.nextEpoch(), ttl, now)
		nv, err := s.writeNode(ctx, "node-claim", node, v, *rec)
		if errors.Is(err, errConflict) && attempt < maxAttempts {
			continue
		}
		if err != nil {
			return nil, err
		}
		return &Session{k: s.newKeeper("", node, ttl, nv, s.authority(rec.Expires, start), start)}, nil
	}
}

// AcquireSession is OpenSession that waits while the node lease is held
// (by a previous process of the same node, say) and retries transient
// errors, until ctx ends: a node that cannot get its lease at start
// retries rather than exiting.
func (s *Store) AcquireSession(ctx context.Context, node string, ttl time.Duration) (*Session, error) {
	for {
		ss, err := s.OpenSession(ctx, node, ttl)
		if err == nil {
			return ss, nil
		}
		var held *HeldError
		wait := 100 * time.Millisecond
		switch {
		case errors.As(err, &held):
			wait = max(time.Until(held.Expires), time.Millisecond)
		case errors.Is(err, wire.ErrInvalidNode), errors.Is(err, ErrInvalidOption), ctx.Err() != nil:
			return nil, err
		}
		s.log.Info("waiting for the node lease", "node", node, "retry_in", wait, "reason", err)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("ownership: node lease of %q: %w (last: %v)", node, ctx.Err(), err)
		case <-time.After(wait):
		}
	}
}

// Node is the session's node.
func (ss *Session) Node() string { return ss.k.node }

// Epoch is the node lease epoch that the session's ids name.
func (ss *Session) Epoch() uint64 { return ss.k.epoch }

// Done is closed when the session ends: self-fenced, closed or ended.
func (ss *Session) Done() <-chan struct{} { return ss.k.Done() }

// Err is nil while the session lives; then a fencing.Cause or ErrClosed.
func (ss *Session) Err() error { return ss.k.Err() }

// Cause is the self-fence cause, or "".
func (ss *Session) Cause() fencing.Cause { return ss.k.Cause() }

// Context is cancelled when the session ends (context.Cause gives Err).
func (ss *Session) Context() context.Context { return ss.k.Context() }

// ValidUntil is the local instant by which the node and every id it holds
// through the session must stop acting.
func (ss *Session) ValidUntil() time.Time { return ss.k.ValidUntil() }

// Lease is the node lease itself (Fence.ID is "").
func (ss *Session) Lease() *Lease { return ss.k.Lease() }

// Renewals counts the node lease renewals written so far.
func (ss *Session) Renewals() uint64 { return ss.k.Renewals() }

// Close releases the node lease: every id it backs is free at once (within
// jsapi.Timeout). It returns the first Close's outcome on every call.
func (ss *Session) Close() error {
	ctx, cancel := jsapi.WithTimeout(context.Background())
	defer cancel()
	return ss.CloseContext(ctx)
}

// CloseContext is Close bounded by ctx.
func (ss *Session) CloseContext(ctx context.Context) error {
	ss.closed.Do(func() { ss.err = ss.k.Release(ctx) })
	return ss.err
}

// End is a worker's last step with its session: the self-fence cause if
// the session fenced; else the node lease released (within 5 s), which
// frees every id or shard it backs at once, logged on log as "its <what>
// are free". It returns the cause, or nil: a release that fails is logged
// (the lease lapses on its own).
func (ss *Session) End(log *slog.Logger, what string) error {
	if c := ss.Cause(); c != "" {
		return c
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := ss.CloseContext(ctx)
	switch {
	case err == nil:
		log.Info("node lease released: its "+what+" are free", "event", "lease_released", "epoch", ss.Epoch())
	case errors.Is(err, ErrClosed):
	default:
		if c, ok := err.(fencing.Cause); ok {
			return c
		}
		log.Warn("releasing the node lease", "error", err)
	}
	return nil
}

// Orphan stops renewing the node lease without releasing it: its ids lapse
// with it at its expiry, as if the process had died. Idempotent.
func (ss *Session) Orphan() error { return ss.k.Close() }

// usable refuses work on a session that ended or whose authority ran out.
func (ss *Session) usable() error {
	if err := ss.k.Err(); err != nil {
		return fmt.Errorf("ownership: session of node %q: %w", ss.k.node, err)
	}
	if !time.Now().Before(ss.k.ValidUntil()) {
		return fmt.Errorf("ownership: session of node %q: %w", ss.k.node, fencing.CauseWatchdog)
	}
	return nil
}

// backedRecord is a held record of the session's node at epoch, backed by
// the session's current node lease.
func (ss *Session) backedRecord(epoch uint64, now time.Time) (*wire.Record, error) {
	nl := ss.k.Lease()
	if nl.Epoch != ss.Epoch() {
		return nil, fmt.Errorf("ownership: session of node %q changed epoch", ss.k.node)
	}
	return &wire.Record{
		Node: ss.k.node, Epoch: epoch, State: wire.StateHeld, TTLms: ss.k.ttl.Milliseconds(),
		Acquired: now, Expires: nl.Expires, NodeLease: nl.Epoch,
	}, nil
}

func (ss *Session) lease(id string, v view, start time.Time) *Lease {
	return &Lease{
		Fence:      fencing.Fence{World: ss.k.s.world, ID: id, Node: v.rec.Node, Epoch: v.rec.Epoch, Revision: v.rev},
		Expires:    v.rec.Expires,
		TTL:        ss.k.ttl,
		PriorUntil: ss.k.s.priorUntil(v, start),
		rec:        v.rec,
		backing:    ss.k,
	}
}

// Claim takes a free id for the session's node, backed by the node lease:
// no write of its own is ever needed to keep it. Outcomes as Store.Claim;
// an ended or fenced session refuses with its cause.
func (ss *Session) Claim(ctx context.Context, id string) (*Lease, error) {
	if err := wire.ValidateID(id); err != nil {
		return nil, err
	}
	if err := ss.usable(); err != nil {
		return nil, err
	}
	v, start, err := ss.k.s.claim(ctx, id, ss.backedRecord)
	if err != nil {
		return nil, err
	}
	return ss.lease(id, v, start), nil
}

// Seize takes over an owned id (lapsed, or live with force) for the
// session's node, backed by the node lease. Outcomes as Store.Seize; a
// forced seize writes the id's force key first, as Store.Seize does.
func (ss *Session) Seize(ctx context.Context, id string, force bool) (*Lease, error) {
	if err := wire.ValidateID(id); err != nil {
		return nil, err
	}
	if err := ss.usable(); err != nil {
		return nil, err
	}
	v, start, err := ss.k.s.seize(ctx, id, ss.k.node, ss.k.ttl, force, ss.backedRecord)
	if err != nil {
		return nil, err
	}
	return ss.lease(id, v, start), nil
}

// Release frees one id the session's node holds (Store.Release).
func (ss *Session) Release(ctx context.Context, id string) error {
	return ss.k.s.Release(ctx, id, ss.k.node)
}

// ReleaseHeld frees the id of l, a lease this session claimed or seized,
// with one conditional write at the record revision l names, and no read:
// Release reads the record and the node lease backing it first (three
// requests; a worker releasing its idle ids paid them for each).
//
// The write is the one Release would make. While the session is usable
// (its node lease valid by the local clock, less the skew bound) and the
// record is still the one l names (the compare-and-swap), the id is held
// by this node at l's epoch and backed by this session's live node lease:
// what Release would have read, so it would decide the same. Anything else
// takes Release's path: a lease of another session, a session past its
// validity (Release then reads and says whether the id is still held), and
// a write refused because the record moved (the holding rewrote it, or it
// was seized: Release reads it and frees it or says who holds it). The
// outcomes are Release's.
func (ss *Session) ReleaseHeld(ctx context.Context, l *Lease) error {
	if l == nil {
		return fmt.Errorf("ownership: release of a nil lease")
	}
	s := ss.k.s
	if l.backing != ss.k || l.World != s.world || l.rec.NodeLease != ss.Epoch() || ss.usable() != nil {
		return ss.Release(ctx, l.ID)
	}
	now := time.Now().Round(0)
	r := l.rec
	r.State, r.Expires, r.NodeLease = wire.StateFree, now, 0
	over := view{rev: l.Revision, rec: l.rec}
	_, err := s.write(ctx, "release", l.ID, over, r)
	if !errors.Is(err, errConflict) {
		return err
	}
	// Refused: the record moved, or this very write was stored and a
	// second copy refused (as run handles it).
	_, mine, err := s.storedAfterAll(ctx, "release", l.ID, over, r)
	if err != nil {
		return unknownIfTried("release", l.ID, []triedWrite{{rec: r, start: now, over: over}}, err)
	}
	if mine {
		return nil
	}
	return ss.Release(ctx, l.ID)
}
