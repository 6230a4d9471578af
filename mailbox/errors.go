package mailbox

import (
	"errors"

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
	// ErrNotWaiting: Skip was given a message that is not waiting in the
	// id's mailbox (not stored, another id's, or committed already).
	ErrNotWaiting = errors.New("mailbox: no such message waiting")
)
