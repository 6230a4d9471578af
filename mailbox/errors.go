package mailbox

import (
	"github.com/fencepost/fencepost/fencing"
	"github.com/fencepost/fencepost/world"
)

// Sentinel errors of the mailbox administration.
var (
	// ErrInvalidOption wraps a bad option value (a list limit below 1).
	// (fencing.ErrInvalidOption, shared.)
	ErrInvalidOption = fencing.ErrInvalidOption
	// ErrNoState: the world's bucket does not take atomic batches (a
	// world created before per-id state; `fencepost world add` again
	// turns them on). (world.ErrNoState, shared.)
	ErrNoState = world.ErrNoState
)
