package ownership

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/wire"
)

// Read barriers (docs/design.md, invariant 8; docs/reliability.md section
// 6). On a replicated world a read is answered by the member that believes
// it leads the bucket stream, and a leader cut off from its quorum keeps
// believing so for 10 to 20 s: it answers from a state that may lack
// writes the new leader stored. A write is never decided on such a read
// alone (every write is conditional, and only a leader with a quorum
// stores one), but an answer that is a read is: Owner, Guard, and the
// refusals of claim, renew, release and seize. Before such an answer is
// given, the read is confirmed by a barrier: a write of the world's
// barrier key (wire.BarrierKey), conditional on the record's last
// revision being the one read. The server checks that condition at the
// leader against its state with every write in flight, before it proposes
// the barrier, and stores it only once a quorum has it: so a stored
// barrier places the read at a point inside the call at which the record
// was still at that revision. A barrier that finds the record moved on
// (or a write to it in flight) sends the call back to read again; one
// that gets no answer (a deposed leader cannot store it) ends the call
// with an error after its deadline: on the cut-off side of a partition
// the answer is no answer, never a stale one. A single-replica world
// needs none: its one server is the state every write is checked
// against.

// maxConfirms bounds the reads an answer makes while the record keeps
// moving under its barriers.
const maxConfirms = 64

// ErrNotConfirmed: a read could not be confirmed current (its barrier
// failed or was not answered). Nothing was written to any record.
var ErrNotConfirmed = errors.New("ownership: the read could not be confirmed by the bucket stream's leader")

// confirm says whether v, a read of id's record, is still current: true
// on a single-replica world; on a replicated one, when a barrier
// conditional on the record's revision was stored (and, for a view of a
// backed record whose node lease was read, one conditional on the node
// lease's revision, then the record's again: the record was at v.rev at
// both barriers, so unchanged between them, when the node lease was at its
// revision). False: read again. An error: not known (nothing was written
// either way).
func (s *Store) confirm(ctx context.Context, id string, v view) (bool, error) {
	if s.cfg.Replicas <= 1 {
		return true, nil
	}
	if s.beforeConfirm != nil {
		s.beforeConfirm(id)
	}
	rec := wire.RecordSubject(s.world, id)
	ok, err := s.barrier(ctx, id, rec, v.rev)
	if !ok || err != nil || !v.nlRead {
		return ok, err
	}
	if ok, err = s.barrier(ctx, id, wire.KeySubject(s.world, wire.NodeKey(v.rec.Node)), v.nlLast); !ok || err != nil {
		return ok, err
	}
	return s.barrier(ctx, id, rec, v.rev)
}

// barrier publishes the world's barrier conditional on subject being at
// rev.
func (s *Store) barrier(ctx context.Context, id, subject string, rev uint64) (bool, error) {
	s.barriers.Add(1)
	res, err := jsapi.Barrier(ctx, s.js, wire.BucketStream(s.world), wire.BarrierSubject(s.world), subject, rev)
	if err != nil {
		if s.debugOn(ctx) {
			s.debug(ctx, "confirm", id, "subject", subject, "rev", rev, "error", err)
		}
		return false, fmt.Errorf("%w: record of %q at revision %d: %w", ErrNotConfirmed, id, rev, err)
	}
	if s.debugOn(ctx) {
		s.debug(ctx, "confirm", id, "subject", subject, "rev", rev, "outcome", res)
	}
	return res == jsapi.BarrierStored, nil
}

// readConfirmed reads id's record and, on a replicated world, confirms
// the read (confirm), reading again while the record moves under it.
func (s *Store) readConfirmed(ctx context.Context, id string) (view, error) {
	wait := time.Millisecond
	for n := 1; ; n++ {
		v, err := s.read(ctx, id)
		if err != nil {
			return view{}, err
		}
		ok, err := s.confirm(ctx, id, v)
		if err != nil {
			return view{}, err
		}
		if ok {
			return v, nil
		}
		if n >= maxConfirms {
			return view{}, fmt.Errorf("%w: the record of %q moved under %d reads in a row", ErrNotConfirmed, id, n)
		}
		if err := pause(ctx, wait); err != nil {
			return view{}, err
		}
		wait = min(2*wait, 50*time.Millisecond)
	}
}
