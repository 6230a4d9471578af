package ownership

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencepost/fencepost/internal/wire"
)

// Writes for fencepostd, which follows the bucket itself under --auth
// (docs/security.md): the records it writes are ownership's to encode, as
// every record write is (TestLayout_OwnedByWire).

// RetireNode writes node's lease, which the caller read at revision rev as
// rec (held, and lapsed by the caller's clock at now), free at now: the
// write a taker makes before its first takeover of an id backed by a
// lapsed session (backing.go, retireThenWrite), made for node owners whose
// credentials may not write other nodes' leases. It is conditional on rev:
// ErrContended when the lease moved on meanwhile (renewed, or retired by
// someone else).
func (s *Store) RetireNode(ctx context.Context, node string, rev uint64, rec wire.Record, now time.Time) error {
	free := rec
	free.State, free.Expires = wire.StateFree, now
	_, err := s.writeNode(ctx, "retire", node, view{rev: rev, rec: rec}, free)
	if errors.Is(err, errConflict) {
		return fmt.Errorf("%w: the node lease of %q changed", ErrContended, node)
	}
	return err
}

// FreeForgedNode writes node's lease, which the caller read at revision
// rev as rec, free at epoch (the highest epoch the caller saw for it) and
// at: how fencepostd undoes a node lease whose epoch went back or jumped,
// or that was deleted (an owner may write its own node's lease as it
// likes; a session's epoch given twice would make the records of an ended
// session of it live again). It is conditional on rev: ErrContended when
// the lease moved on meanwhile.
func (s *Store) FreeForgedNode(ctx context.Context, node string, rev uint64, rec wire.Record, epoch uint64, at time.Time) error {
	free := rec
	free.Node, free.State, free.Epoch, free.NodeLease, free.Expires = node, wire.StateFree, epoch, 0, at
	_, err := s.writeNode(ctx, "free-forged", node, view{rev: rev, rec: rec}, free)
	if errors.Is(err, errConflict) {
		return fmt.Errorf("%w: the node lease of %q changed", ErrContended, node)
	}
	return err
}

// FreeForged writes id's record, which the caller read at revision rev as
// rec, free at epoch (the highest epoch the caller saw for id, so that
// epochs never go back) and at: how fencepostd undoes a record no honest
// owner writes (a term above the world's max ttl, an epoch gone back). It
// is conditional on rev: ErrContended when the record moved on meanwhile.
func (s *Store) FreeForged(ctx context.Context, id string, rev uint64, rec wire.Record, epoch uint64, at time.Time) error {
	free := rec
	free.State, free.Epoch, free.NodeLease, free.Expires = wire.StateFree, epoch, 0, at
	_, err := s.write(ctx, "free-forged", id, view{rev: rev, rec: rec}, free)
	if errors.Is(err, errConflict) {
		return fmt.Errorf("%w: the record of %q changed", ErrContended, id)
	}
	return err
}
