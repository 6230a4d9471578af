package queue

import (
	"errors"
	"fmt"

	"github.com/fencepost/fencepost/fencing"
)

// Sentinel outcomes and errors of Send.
var (
	// ErrFull: the mailbox is at a limit: its messages, or the world's
	// bytes (*FullError says which). Nothing was stored.
	ErrFull = errors.New("queue: full")
	// ErrTooLarge: the message is larger than the world or the broker
	// allows. Nothing was stored.
	ErrTooLarge = errors.New("queue: message too large")
	// ErrInvalidMessage: a sender, message id or header is not acceptable.
	ErrInvalidMessage = errors.New("queue: invalid message")
	// ErrUnknown: the publish was sent and no acknowledgement came back,
	// or an answer that does not say nothing was stored (*UnknownError).
	// It may have been stored; send again with the same message id to find
	// out (the retry is answered as a duplicate if the first one landed).
	// (fencing.ErrUnknown, shared.)
	ErrUnknown = fencing.ErrUnknown
)

// FullError says which mailbox refused, which limit it hit and what the
// limit is.
type FullError struct {
	ID    string
	Kind  FullKind // which limit: FullMessages or FullBytes
	Limit int64    // messages per mailbox (FullMessages) or the world's bytes (FullBytes)
	Err   error    // the server's refusal
}

// FullKind names the limit a full mailbox hit. The CLI prints it as
// `full limit=N kind=K`.
type FullKind string

// The limits of a mailbox.
const (
	// FullMessages: the mailbox holds the world's max_msgs_per_mailbox
	// messages (Limit is that count).
	FullMessages FullKind = "messages"
	// FullBytes: the world's mailboxes and dead letters together hold its
	// max_bytes, as the server counts stored messages (Limit is that many
	// bytes).
	FullBytes FullKind = "bytes"
)

func (e *FullError) Error() string {
	if e.Kind == FullBytes {
		return fmt.Sprintf("queue: the mailbox of %q is full: the world's mailboxes hold its max_bytes of %d bytes; nothing was stored: drain some or raise the world's limit", e.ID, e.Limit)
	}
	return fmt.Sprintf("queue: the mailbox of %q is full (%d messages, the world's max_msgs); nothing was stored: drain it or raise the world's limit", e.ID, e.Limit)
}

// Is matches ErrFull.
func (e *FullError) Is(target error) bool { return target == ErrFull }

// Unwrap gives the server's refusal.
func (e *FullError) Unwrap() error { return e.Err }

// The limits a TooLargeError names.
const (
	LimitMaxBody    = "max_body"    // the world's largest body
	LimitMaxHeaders = "max_headers" // the world's header room
	LimitMaxPayload = "max_payload" // the server's largest message
)

// TooLargeError says what was too large (the body, the headers or the
// whole message), by how much, and which limit refused it.
type TooLargeError struct {
	Of    string // LimitMaxBody, LimitMaxHeaders or LimitMaxPayload
	Size  int    // the body, the headers (HeaderSize) or both, bytes
	Limit int    // the limit named by Of
}

func (e *TooLargeError) Error() string {
	switch e.Of {
	case LimitMaxHeaders:
		return fmt.Sprintf("queue: the headers are %d bytes, this world's max_headers is %d; nothing was sent", e.Size, e.Limit)
	case LimitMaxPayload:
		return fmt.Sprintf("queue: the message is %d bytes (body and headers), the server's max_payload is %d; nothing was sent", e.Size, e.Limit)
	}
	return fmt.Sprintf("queue: the body is %d bytes, this world's max_body is %d; nothing was sent", e.Size, e.Limit)
}

// Is matches ErrTooLarge.
func (e *TooLargeError) Is(target error) bool { return target == ErrTooLarge }

// UnknownError: the publish was sent and its outcome is not known: no
// answer came (a timeout, a lost connection, a refused subscription to
// the reply inbox), or the broker answered with an error that does not
// mean "nothing was stored" (NothingStored). The message may be stored.
type UnknownError struct {
	ID    string
	MsgID string // the message id of the send, "" if none
	Err   error  // what ended the wait, or the broker's answer
}

func (e *UnknownError) Error() string {
	hint := "read the mailbox (stat) before posting again: without a message id a retry may store it twice"
	if e.MsgID != "" {
		hint = fmt.Sprintf("post again with the same message id %q: if it was stored, the retry is answered as a duplicate", e.MsgID)
	}
	return fmt.Sprintf("queue: send to %q: outcome unknown, the message may be stored (%v); %s", e.ID, e.Err, hint)
}

// Is matches ErrUnknown.
func (e *UnknownError) Is(target error) bool { return target == ErrUnknown }

// Unwrap gives the transport error.
func (e *UnknownError) Unwrap() error { return e.Err }
