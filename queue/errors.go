package queue

import (
	"errors"
	"fmt"

	"github.com/fencepost/fencepost/fencing"
)

// Sentinel outcomes and errors of Send.
var (
	// ErrFull: the mailbox is at its limit (messages, or bytes as a message
	// count; see docs/design.md section 3). Nothing was stored.
	ErrFull = errors.New("queue: full")
	// ErrTooLarge: the message is larger than the world allows. Nothing was
	// sent.
	ErrTooLarge = errors.New("queue: message too large")
	// ErrInvalidMessage: a sender, message id or header is not acceptable.
	ErrInvalidMessage = errors.New("queue: invalid message")
	// ErrUnknown: the publish was sent and no acknowledgement came back. It
	// may have been stored; send again with the same message id to find out
	// (the retry is answered as a duplicate if the first one landed).
	// (fencing.ErrUnknown, shared.)
	ErrUnknown = fencing.ErrUnknown
)

// FullError says which mailbox refused and at what limit.
type FullError struct {
	ID    string
	Limit int64 // messages per mailbox
	Err   error // the server's refusal
}

func (e *FullError) Error() string {
	return fmt.Sprintf("queue: the mailbox of %q is full (%d messages); nothing was stored: drain it or raise the world's limit", e.ID, e.Limit)
}

// Is matches ErrFull.
func (e *FullError) Is(target error) bool { return target == ErrFull }

// Unwrap gives the server's refusal.
func (e *FullError) Unwrap() error { return e.Err }

// TooLargeError says how large the message was and what the world takes.
type TooLargeError struct {
	Size  int // body plus headers, bytes
	Limit int // the world's max message size (or the server's max payload)
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("queue: the message is %d bytes (body and headers), this world takes at most %d; nothing was sent", e.Size, e.Limit)
}

// Is matches ErrTooLarge.
func (e *TooLargeError) Is(target error) bool { return target == ErrTooLarge }

// UnknownError: the publish was sent and its outcome is not known.
type UnknownError struct {
	ID    string
	MsgID string
	Err   error
}

func (e *UnknownError) Error() string {
	hint := "run stat to see the mailbox; posting again may store the message twice (give a message id to make retries safe)"
	if e.MsgID != "" {
		hint = fmt.Sprintf("post again with the same message id %q: a copy that landed is reported as a duplicate", e.MsgID)
	}
	return fmt.Sprintf("queue: send to %q: outcome unknown (%v); %s", e.ID, e.Err, hint)
}

// Is matches ErrUnknown.
func (e *UnknownError) Is(target error) bool { return target == ErrUnknown }

// Unwrap gives the transport error.
func (e *UnknownError) Unwrap() error { return e.Err }
