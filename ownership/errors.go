package ownership

import (
	"errors"
	"fmt"
	"time"

	"github.com/fencepost/fencepost/fencing"
)

// Sentinel outcomes. The typed errors below match them with errors.Is.
// ErrContended and ErrUnknown are the shared ones of package fencing.
var (
	ErrHeld      = errors.New("ownership: held-by")
	ErrFree      = errors.New("ownership: free")
	ErrNotOwner  = errors.New("ownership: not-owner")
	ErrFenced    = errors.New("ownership: fenced")
	ErrLive      = errors.New("ownership: live")
	ErrContended = fencing.ErrContended
	ErrUnknown   = fencing.ErrUnknown
)

// ErrEpochsExhausted: the record is at the last epoch (2^64-1), so no claim
// or seize can give it a higher one. Nothing is written.
var ErrEpochsExhausted = errors.New("ownership: epochs exhausted")

// HeldError: someone (maybe the caller itself) holds a live lease.
type HeldError struct {
	ID      string
	Node    string
	Epoch   uint64
	Expires time.Time
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("ownership: %q is held by node %q at epoch %d until %s", e.ID, e.Node, e.Epoch, e.Expires.Format(time.RFC3339Nano))
}

// Is matches ErrHeld.
func (e *HeldError) Is(target error) bool { return target == ErrHeld }

// FreeError: nobody holds a live lease on the id. LastEpoch is the epoch on
// the record (0 if the id was never owned).
type FreeError struct {
	ID        string
	LastEpoch uint64
}

func (e *FreeError) Error() string {
	return fmt.Sprintf("ownership: %q is free (last epoch %d)", e.ID, e.LastEpoch)
}

// Is matches ErrFree.
func (e *FreeError) Is(target error) bool { return target == ErrFree }

// NotOwnerError: a release by a node that is not the live holder.
type NotOwnerError struct {
	ID     string
	Holder string
	Epoch  uint64
}

func (e *NotOwnerError) Error() string {
	return fmt.Sprintf("ownership: %q is held by node %q (epoch %d), not by the caller", e.ID, e.Holder, e.Epoch)
}

// Is matches ErrNotOwner.
func (e *NotOwnerError) Is(target error) bool { return target == ErrNotOwner }

// FencedError: the (node, epoch) presented is no longer on the record.
type FencedError struct {
	ID      string
	Current uint64
	Holder  string
}

func (e *FencedError) Error() string {
	return fmt.Sprintf("ownership: %q is fenced: the current epoch is %d", e.ID, e.Current)
}

// Is matches ErrFenced.
func (e *FencedError) Is(target error) bool { return target == ErrFenced }

// LiveError: a seize without force found a live holder.
type LiveError struct {
	ID      string
	Node    string
	Epoch   uint64
	Expires time.Time
}

func (e *LiveError) Error() string {
	return fmt.Sprintf("ownership: %q has a live holder %q (epoch %d) until %s; seize with force to take it", e.ID, e.Node, e.Epoch, e.Expires.Format(time.RFC3339Nano))
}

// Is matches ErrLive.
func (e *LiveError) Is(target error) bool { return target == ErrLive }

// UnknownError: a write was sent and no answer came back. It may have been
// stored. Read the record (Owner) to learn what happened.
type UnknownError struct {
	Op  string
	ID  string
	Err error
}

func (e *UnknownError) Error() string {
	return fmt.Sprintf("ownership: %s of %q: outcome unknown (the write was sent, no reply came: %v); run owner to see what happened", e.Op, e.ID, e.Err)
}

// Is matches ErrUnknown.
func (e *UnknownError) Is(target error) bool { return target == ErrUnknown }

// Unwrap gives the transport error.
func (e *UnknownError) Unwrap() error { return e.Err }
