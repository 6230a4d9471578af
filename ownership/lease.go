package ownership

import (
	"time"

	"github.com/fencepost/fencepost/fencing"
	"github.com/fencepost/fencepost/internal/wire"
)

// Lease is a won claim, seize or renewal: the fence to carry into every
// commit, the expiry published on the record, and the local deadline of the
// holder's authority.
type Lease struct {
	fencing.Fence
	Expires time.Time     // expiry on the record (the writer's wall clock)
	TTL     time.Duration // the term asked for
	// PriorUntil is set when the claim or seize took the id from a holder
	// (its lease lapsed, or it was seized from): that holder may have
	// handed out, and not committed, messages stored up to this instant
	// (the claim's send time plus the skew bound, to compare with a
	// message's stream timestamp). Zero when the id was free (never held,
	// or released: a release commits first). Deliveries use it to say a
	// message may have been seen before (drain.Message.Redelivered).
	PriorUntil time.Time

	validUntil time.Time   // local, with a monotonic reading
	rec        wire.Record // the record as written (for the keeper)
	backing    *Keeper     // the node lease keeper of a node-backed lease
}

// ValidUntil is the instant (local clock) after which the holder must stop
// acting: the published expiry less the clock-bound margin, measured from
// before the write was sent. For a lease backed by a node lease (see
// Session) it is the node lease's, and moves on with each of its renewals.
func (l *Lease) ValidUntil() time.Time {
	if l.backing != nil {
		return l.backing.ValidUntil()
	}
	return l.validUntil
}

// Backed reports whether the lease is held through a Session (its record
// names the node lease, which keeps it).
func (l *Lease) Backed() bool { return l.backing != nil }

// Valid reports whether the holder may still act. It uses the monotonic
// clock, so wall-clock jumps do not extend it.
func (l *Lease) Valid() bool { return time.Now().Before(l.ValidUntil()) }

// Status is what the record says about an id.
type Status struct {
	ID       string
	Held     bool      // a live lease exists
	Node     string    // holder (or last holder when free)
	Epoch    uint64    // current epoch (last epoch when free; 0 never owned)
	Expires  time.Time // expiry when held
	Revision uint64    // record revision (0 when absent)
}
