package fencing

import "errors"

// The outcomes every package of fencepost shares: one vocabulary. Each
// package's sentinel of the same name is this very value
// (ownership.ErrUnknown == drain.ErrUnknown == queue.ErrUnknown ==
// ErrUnknown), so errors.Is matches whichever package answered, and the
// package's typed error says which operation, id and cause.
var (
	// ErrUnknown: a write was sent and no answer came. It may or may not
	// have been applied; read the state, or retry where the operation is
	// idempotent (a send with the same key, a drain).
	ErrUnknown = errors.New("outcome unknown")
	// ErrContended: another writer acted between this one's read and its
	// write (a record that changed under a seize, a drain lock another
	// drain holds). Nothing was written; decide again.
	ErrContended = errors.New("contended")
	// ErrInvalidOption wraps a bad option value given to a constructor.
	ErrInvalidOption = errors.New("invalid option")
)
