package ownership

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencepost/fencepost/fencing"
	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/wire"
)

// Authority is what a holding may do: write with Fence, and act until the
// local instant Until (the record's expiry, or its node lease's, less the
// clock-bound margin of a lease: skew + 2*drift*span). Until decides
// liveness only; the fence decides every write.
type Authority struct {
	Fence fencing.Fence
	Until time.Time // local, monotonic
	// Backed: the holding is through a node lease session (the record
	// names it); its process's worker is the one that drains it.
	Backed bool
}

// Valid says whether the authority still holds by the local clock.
func (a Authority) Valid() bool { return time.Now().Before(a.Until) }

// Authorize answers "may node, at epoch, act on id now, and until when":
// it reads the record through the stream leader and returns the fence at
// the record's current revision and the local deadline. Otherwise
// *FreeError (no live lease), *HeldError (another node holds id) or
// *FencedError (node holds id at another epoch). It writes nothing.
func (s *Store) Authorize(ctx context.Context, id, node string, epoch uint64) (Authority, error) {
	if err := s.checkIDNode(id, node); err != nil {
		return Authority{}, err
	}
	start := time.Now()
	v, err := s.read(ctx, id)
	if err != nil {
		return Authority{}, err
	}
	return s.authorize(id, node, epoch, v, start)
}

func (s *Store) authorize(id, node string, epoch uint64, v view, start time.Time) (Authority, error) {
	switch {
	case !v.live(start):
		return Authority{}, &FreeError{ID: id, LastEpoch: v.lastEpoch()}
	case v.rec.Node != node:
		return Authority{}, &HeldError{ID: id, Node: v.rec.Node, Epoch: v.rec.Epoch, Expires: v.expires()}
	case v.rec.Epoch != epoch:
		return Authority{}, &FencedError{ID: id, Current: v.rec.Epoch, Holder: v.rec.Node}
	}
	return Authority{
		Fence:  fencing.Fence{World: s.world, ID: id, Node: node, Epoch: epoch, Revision: v.rev},
		Until:  s.authority(v.expires(), start),
		Backed: v.rec.Backed(),
	}, nil
}

// Adopt is Authorize as a Lease, for a holding won elsewhere (a claim
// made by another process, whose node and epoch the caller names): the
// fence at the record's current revision, valid by the local clock until
// Authorize's Until, never renewed (for a holding through a node lease
// session, Until as that lease stood at the read: the session's worker is
// the one that keeps it). priorUntil becomes the lease's PriorUntil:
// messages stored until then may have been handed out by an earlier
// holding (the caller cannot know how the epoch was won). Errors as
// Authorize; it writes nothing.
func (s *Store) Adopt(ctx context.Context, id, node string, epoch uint64, priorUntil time.Time) (*Lease, error) {
	if err := s.checkIDNode(id, node); err != nil {
		return nil, err
	}
	start := time.Now()
	v, err := s.read(ctx, id)
	if err != nil {
		return nil, err
	}
	a, err := s.authorize(id, node, epoch, v, start)
	if err != nil {
		return nil, err
	}
	return &Lease{Fence: a.Fence, Expires: v.expires(), TTL: time.Duration(v.rec.TTLms) * time.Millisecond, PriorUntil: priorUntil, validUntil: a.Until, rec: v.rec}, nil
}

// Touch rewrites id's record unchanged, by compare-and-swap at the revision
// it reads, if node holds id at epoch; then it authorizes again. Every
// fenced write that expected an earlier revision is refused from then on:
// a drain that took over from a stalled drain of the same holding uses it
// so that the stalled one can no longer commit (docs/design.md 3.5). A
// record that moved meanwhile is left as it is (its revision moved on
// already). Errors as Authorize.
func (s *Store) Touch(ctx context.Context, id, node string, epoch uint64) (Authority, error) {
	if err := s.checkIDNode(id, node); err != nil {
		return Authority{}, err
	}
	v, err := s.read(ctx, id)
	if err != nil {
		return Authority{}, err
	}
	if v.present() && v.rec.Node == node && v.rec.Epoch == epoch {
		if _, err := s.write(ctx, "touch", id, v, v.rec); err != nil && !errors.Is(err, errConflict) {
			return Authority{}, err
		}
	}
	return s.Authorize(ctx, id, node, epoch)
}

// Unchanged says whether id's record is still at revision rev: the
// cheapest proof that a holding that wrote or read it at rev is still the
// one on the record (for a holding through a session, whose node lease
// renewals never rewrite the id record). A false answer says nothing more:
// Authorize gives the outcome.
//
// The read is made after the call: through the stream leader on a
// replicated world; on a single replica, calls that arrive while a read is
// in flight share the next one, a multi-last direct get of up to 1,000
// records (jsapi.LastReads), so that a worker checking many ids pays a
// round trip per batch, not per id.
func (s *Store) Unchanged(ctx context.Context, id string, rev uint64) (bool, error) {
	if s.cfg.Replicas == 1 {
		return s.unchangedBatched(ctx, id, rev)
	}
	m, err := jsapi.LeaderGet(ctx, s.js.Conn(), wire.BucketStream(s.world), jsapi.GetRequest{LastFor: wire.RecordSubject(s.world, id)})
	if errors.Is(err, jsapi.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("ownership: read record of %q: %w", id, err)
	}
	return m.Sequence == rev, nil
}
