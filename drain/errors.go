package drain

import (
	"errors"
	"fmt"
	"time"

	"github.com/fencepost/fencepost/fencing"
)

// Sentinel outcomes and errors of a drain.
var (
	// ErrContended: another drain of the same id holds the drain lock, or
	// took it over after this drain's lock lapsed.
	// (fencing.ErrContended, shared.)
	ErrContended = fencing.ErrContended
	// ErrUnknown: a cursor write was sent and no answer came; the messages
	// of that batch may or may not have left the mailbox. A later drain
	// reads the cursor and goes on from whatever was stored.
	// (fencing.ErrUnknown, shared.)
	ErrUnknown = fencing.ErrUnknown
	// ErrDeadLetter: a message that ran out of deliveries could not be
	// stored in the dead letters (they are full, or the message with the
	// dead-letter headers is over the world's size limit). It stays in the
	// mailbox, and the drain stops.
	ErrDeadLetter = errors.New("drain: cannot dead-letter")
	// ErrInvalidOption wraps a bad option value.
	ErrInvalidOption = fencing.ErrInvalidOption
)

// ContendedError names the drain that holds an id's lock.
type ContendedError struct {
	ID      string
	Node    string    // holder of the lock (may be empty when unknown)
	Epoch   uint64    // the holder's epoch
	Expires time.Time // when the lock lapses unless renewed
	Lost    bool      // this drain held the lock and lost it
	// Session: the id is held through node Node's session, whose worker
	// drains it (with a Holding, which takes no drain lock).
	Session bool
}

func (e *ContendedError) Error() string {
	if e.Session {
		return fmt.Sprintf("drain: %q is held through node %q's session (epoch %d): its worker drains it; stop the worker, or seize the id, to drain it here", e.ID, e.Node, e.Epoch)
	}
	if e.Lost {
		return fmt.Sprintf("drain: lost the drain lock of %q (it lapsed and another drain took it over); stopped", e.ID)
	}
	if e.Node == "" {
		return fmt.Sprintf("drain: another drain of %q holds its lock", e.ID)
	}
	return fmt.Sprintf("drain: a drain of %q by node %q (epoch %d) holds its lock until %s", e.ID, e.Node, e.Epoch, e.Expires.Format(time.RFC3339Nano))
}

// Is matches ErrContended.
func (e *ContendedError) Is(target error) bool { return target == ErrContended }

// UnknownError: a commit's outcome is unknown.
type UnknownError struct {
	ID     string
	Cursor uint64 // the cursor value that was being written
	Err    error
}

func (e *UnknownError) Error() string {
	return fmt.Sprintf("drain: commit of %q up to sequence %d: outcome unknown (%v); run stat to see the cursor, drain again to go on", e.ID, e.Cursor, e.Err)
}

// Is matches ErrUnknown.
func (e *UnknownError) Is(target error) bool { return target == ErrUnknown }

// Unwrap gives the transport error.
func (e *UnknownError) Unwrap() error { return e.Err }
