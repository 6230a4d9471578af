package queue

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/world"
)

// Queue posts into the mailboxes of one world. It is safe for concurrent
// use.
type Queue struct {
	world   string
	js      jetstream.JetStream
	maxSize int   // the world's max message size, body plus headers
	limit   int64 // messages per mailbox, as the stream enforces it
}

// Posted is the outcome of a stored message: its sequence in the world's
// mailbox stream. Duplicate means a message with the same message id was
// posted inside the dedupe window; Seq is then the first one's.
type Posted struct {
	ID        string
	Seq       uint64
	Duplicate bool
}

// New returns the queue of an open world.
func New(w *world.World) *Queue {
	limit := w.Config.MaxMsgsPerMailbox
	if info := w.Mailbox.CachedInfo(); info != nil && info.Config.MaxMsgsPerSubject > 0 {
		limit = info.Config.MaxMsgsPerSubject
	}
	return &Queue{world: w.Name, js: w.JS, maxSize: int(w.Config.MaxMsgSize), limit: limit}
}

// Limit is the number of messages one mailbox holds before Send reports
// ErrFull (see docs/design.md section 3 for how the byte limit folds in).
func (q *Queue) Limit() int64 { return q.limit }

// Send posts body into id's mailbox and returns once JetStream stored it
// (Posted), whether or not anyone owns id. It returns *FullError (ErrFull)
// when the mailbox is at its limit, *TooLargeError (ErrTooLarge) before
// sending anything too large, ErrInvalidMessage for a bad id, sender,
// message id or header, and *UnknownError (ErrUnknown) when the publish was
// sent and no acknowledgement came.
func (q *Queue) Send(ctx context.Context, id string, body []byte, opts ...SendOption) (Posted, error) {
	m, o, err := q.message(id, body, opts)
	if err != nil {
		return Posted{}, err
	}
	ack, err := q.js.PublishMsg(ctx, m)
	if err != nil {
		return Posted{}, q.refusal(id, o.msgID, err)
	}
	return Posted{ID: id, Seq: ack.Sequence, Duplicate: ack.Duplicate}, nil
}

// Pending is a message posted with SendAsync whose acknowledgement has not
// been waited for.
type Pending struct {
	q     *Queue
	id    string
	msgID string
	f     jetstream.PubAckFuture
}

// SendAsync posts like Send without waiting for the acknowledgement: many
// messages are then in flight at once. Wait gives each outcome; a message is
// posted only once Wait returned it.
func (q *Queue) SendAsync(id string, body []byte, opts ...SendOption) (*Pending, error) {
	m, o, err := q.message(id, body, opts)
	if err != nil {
		return nil, err
	}
	f, err := q.js.PublishMsgAsync(m)
	if err != nil {
		return nil, q.refusal(id, o.msgID, err)
	}
	return &Pending{q: q, id: id, msgID: o.msgID, f: f}, nil
}

// Wait returns the outcome of an asynchronous send, with the errors of
// Send.
func (p *Pending) Wait(ctx context.Context) (Posted, error) {
	select {
	case ack := <-p.f.Ok():
		return Posted{ID: p.id, Seq: ack.Sequence, Duplicate: ack.Duplicate}, nil
	case err := <-p.f.Err():
		return Posted{}, p.q.refusal(p.id, p.msgID, err)
	case <-ctx.Done():
		return Posted{}, &UnknownError{ID: p.id, MsgID: p.msgID, Err: ctx.Err()}
	}
}

// message validates and builds the JetStream message of one send.
func (q *Queue) message(id string, body []byte, opts []SendOption) (*nats.Msg, sendOptions, error) {
	var o sendOptions
	for _, opt := range opts {
		opt(&o)
	}
	if err := wire.ValidateID(id); err != nil {
		return nil, o, err
	}
	h := nats.Header{}
	for k, vs := range o.headers {
		for _, v := range vs {
			if err := ValidateHeader(k, v); err != nil {
				return nil, o, err
			}
			h.Add(k, v)
		}
	}
	if o.from != "" {
		if err := ValidateFrom(o.from); err != nil {
			return nil, o, err
		}
		h.Set(HeaderFrom, o.from)
	}
	if o.msgID != "" {
		if err := ValidateMsgID(o.msgID); err != nil {
			return nil, o, err
		}
		h.Set(HeaderMsgID, wire.ScopedMsgID(id, o.msgID))
	}
	if err := q.checkSize(len(body) + HeaderSize(h)); err != nil {
		return nil, o, err
	}
	m := &nats.Msg{Subject: wire.MailboxSubject(q.world, id), Data: body}
	if len(h) > 0 {
		m.Header = h
	}
	return m, o, nil
}

// DeadLetterReserve is the room Send keeps free in every message for the
// headers a dead letter adds (at most half the world's max message size).
const DeadLetterReserve = 1024

func (q *Queue) checkSize(size int) error {
	limit := q.maxSize - min(DeadLetterReserve, q.maxSize/2)
	if mp := int(q.js.Conn().MaxPayload()); mp > 0 && mp < limit {
		limit = mp
	}
	if size > limit {
		return &TooLargeError{Size: size, Limit: limit}
	}
	return nil
}

// refusal turns a publish error into the queue's outcomes, keeping the
// server's error underneath.
func (q *Queue) refusal(id, msgID string, err error) error {
	var apiErr *jetstream.APIError
	switch {
	case errors.As(err, &apiErr) && apiErr.ErrorCode == ErrCodeFull:
		// The only store failures the server answers are limit refusals;
		// the mailbox stream sets no stream-wide limit and the size was
		// checked above, so this is the per-subject limit.
		return &FullError{ID: id, Limit: q.limit, Err: err}
	case errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum,
		errors.Is(err, nats.ErrMaxPayload):
		return fmt.Errorf("%w: %w", ErrTooLarge, err)
	case errors.As(err, &apiErr):
		return fmt.Errorf("queue: send to %q refused by the server: %w", id, err)
	case errors.Is(err, jetstream.ErrTooManyStalledMsgs):
		return fmt.Errorf("queue: send to %q not sent: too many asynchronous sends await their acknowledgement; wait for some: %w", id, err)
	case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrNoResponders):
		return fmt.Errorf("queue: send to %q: no stream takes subject %s (is world %q there?): %w", id, wire.MailboxSubject(q.world, id), q.world, err)
	}
	return &UnknownError{ID: id, MsgID: msgID, Err: err}
}

// ErrCodeFull is JetStream's "store failed" error (JSStreamStoreFailedF),
// which a stream with DiscardNew answers for a limit it would exceed: on a
// mailbox, a full one (docs/wire.md).
const ErrCodeFull jetstream.ErrorCode = 10077
