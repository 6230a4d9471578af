package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/call"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/world"
)

// Queue posts into the mailboxes of one world. It is safe for concurrent
// use.
type Queue struct {
	world      string
	js         jetstream.JetStream
	maxBody    int   // the world's max_body
	maxHeaders int   // the world's max_headers, as HeaderSize counts them
	limit      int64 // messages per mailbox, as the stream enforces it
	maxBytes   int64 // bytes of the world's mailbox stream; 0: no limit
	timers     bool  // the world has its timer stream (world.AllowsTimers)
	shards     int   // the world's shards (0: per-id), for Remind's fence
}

// Posted is the outcome of a stored message: its sequence in the world's
// mailbox stream. Duplicate means a message with the same message id was
// posted inside the dedupe window; Seq is then the first one's.
//
// A timer (WithAt, WithAfter) is posted once its schedule is stored: Seq
// is then the schedule's sequence in the world's timer stream, not a
// mailbox sequence, and Key and At name the timer and say when it fires
// (zero for a plain post).
type Posted struct {
	ID        string
	Seq       uint64
	Duplicate bool
	Key       string
	At        time.Time
}

// New returns the queue of an open world. The limits a full mailbox
// reports are the mailbox stream's own (what the broker enforces), or
// the world's settings if the stream's config is not at hand (a world
// opened for posting only, world.OpenToPost).
func New(w *world.World) *Queue {
	limit, maxBytes := w.Config.MailboxMsgs(), w.Config.MaxBytes
	if handles.Of(w).Mailbox == nil {
		return &Queue{world: w.Name, js: handles.Of(w).JS, maxBody: int(w.Config.MaxBody), maxHeaders: int(w.Config.MaxHeaders), limit: limit, maxBytes: maxBytes, timers: w.AllowsTimers(), shards: w.Config.Shards}
	}
	if info := handles.Of(w).Mailbox.CachedInfo(); info != nil {
		if info.Config.MaxMsgsPerSubject > 0 {
			limit = info.Config.MaxMsgsPerSubject
		}
		maxBytes = max(info.Config.MaxBytes, 0)
	}
	return &Queue{world: w.Name, js: handles.Of(w).JS, maxBody: int(w.Config.MaxBody), maxHeaders: int(w.Config.MaxHeaders), limit: limit, maxBytes: maxBytes, timers: w.AllowsTimers(), shards: w.Config.Shards}
}

// Limit is the number of messages one mailbox holds before Send reports
// ErrFull (FullError with Kind FullMessages).
func (q *Queue) Limit() int64 { return q.limit }

// MaxBytes is the number of bytes the world's mailboxes and dead letters
// hold together before Send reports ErrFull (FullError with Kind
// FullBytes), as the server counts stored messages; 0 is no limit.
func (q *Queue) MaxBytes() int64 { return q.maxBytes }

// MaxBody is the largest body Send accepts, in bytes: one byte more is
// *TooLargeError naming max_body.
func (q *Queue) MaxBody() int { return q.maxBody }

// MaxHeaders is the most header bytes (HeaderSize) Send accepts.
func (q *Queue) MaxHeaders() int { return q.maxHeaders }

// Send posts body into id's mailbox and returns once JetStream stored it
// (Posted), whether or not anyone owns id. It returns *FullError (ErrFull)
// when the mailbox is at its limit, *TooLargeError (ErrTooLarge) before
// sending anything too large (ErrTooLarge also when the broker refused
// it for its size), ErrInvalidMessage for a bad id, sender, message id or
// header, an error naming the server's refusal when it stored nothing,
// and *UnknownError (ErrUnknown) when the publish was sent and no
// acknowledgement came, or an answer that does not say nothing was
// stored (docs/wire.md "Limits and errors").
func (q *Queue) Send(ctx context.Context, id string, body []byte, opts ...SendOption) (Posted, error) {
	m, o, err := q.message(id, body, opts)
	if err != nil {
		return Posted{}, err
	}
	ack, err := q.js.PublishMsg(ctx, m)
	if err != nil {
		return Posted{}, q.refused(id, o, withCause(ctx, err))
	}
	return o.timer.posted(id, ack), nil
}

// withCause adds to err the cause of ctx, when ctx ended with one of its
// own (context.WithCancelCause): a refusal by the server that ended the
// send says more than "context canceled".
func withCause(ctx context.Context, err error) error {
	if ctx.Err() == nil {
		return err
	}
	if cause := context.Cause(ctx); cause != nil && cause != ctx.Err() && !errors.Is(err, cause) {
		return fmt.Errorf("%w: %w", err, cause)
	}
	return err
}

// Pending is a message posted with SendAsync whose acknowledgement has not
// been waited for.
type Pending struct {
	q     *Queue
	id    string
	msgID string
	timer timerOpts
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
		return nil, q.refused(id, o, err)
	}
	return &Pending{q: q, id: id, msgID: o.msgID, timer: o.timer, f: f}, nil
}

// Wait returns the outcome of an asynchronous send, with the errors of
// Send.
func (p *Pending) Wait(ctx context.Context) (Posted, error) {
	select {
	case ack := <-p.f.Ok():
		return p.timer.posted(p.id, ack), nil
	case err := <-p.f.Err():
		return Posted{}, p.q.refused(p.id, sendOptions{msgID: p.msgID, timer: p.timer}, err)
	case <-ctx.Done():
		return Posted{}, &UnknownError{ID: p.id, MsgID: p.msgID, Err: withCause(ctx, ctx.Err())}
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
	if o.replyTo != "" {
		if err := call.CheckSubject(o.replyTo); err != nil {
			return nil, o, fmt.Errorf("%w: %w", ErrInvalidMessage, err)
		}
		h.Set(call.HeaderReplyTo, o.replyTo)
	}
	if o.timer.set() || o.timer.keySet {
		m, err := q.timerMessage(id, body, h, &o) // timer.go
		return m, o, err
	}
	if err := q.checkSize(len(body), HeaderSize(h)); err != nil {
		return nil, o, err
	}
	m := &nats.Msg{Subject: wire.MailboxSubject(q.world, id), Data: body}
	if len(h) > 0 {
		m.Header = h
	}
	return m, o, nil
}

// checkSize refuses, before anything is sent, a body over max_body,
// headers over max_headers, and a message the connection would not send
// (over the server's max_payload, which a world's creation checks against
// max_body + max_headers, but a server may since have lowered).
func (q *Queue) checkSize(body, headers int) error {
	switch {
	case body > q.maxBody:
		return &TooLargeError{Of: LimitMaxBody, Size: body, Limit: q.maxBody}
	case headers > q.maxHeaders:
		return &TooLargeError{Of: LimitMaxHeaders, Size: headers, Limit: q.maxHeaders}
	}
	if mp := int(q.js.Conn().MaxPayload()); mp > 0 && body+headers > mp {
		return &TooLargeError{Of: LimitMaxPayload, Size: body + headers, Limit: mp}
	}
	return nil
}

// refusal turns a publish error into the queue's outcomes, keeping the
// server's error underneath. Only an answer known to mean "nothing was
// stored" is a refusal (docs/wire.md "Limits and errors"); any other
// failure after the publish was sent leaves the outcome unknown.
func (q *Queue) refusal(id, msgID string, err error) error {
	if full := q.AsFull(id, err); full != nil {
		return full
	}
	var apiErr *jetstream.APIError
	switch {
	case errors.As(err, &apiErr):
		return q.answered(id, msgID, apiErr, err)
	case errors.Is(err, nats.ErrMaxPayload):
		return fmt.Errorf("%w: %w", ErrTooLarge, err)
	case errors.Is(err, jetstream.ErrTooManyStalledMsgs):
		return fmt.Errorf("queue: send to %q not sent: too many asynchronous sends await their acknowledgement; wait for some: %w", id, err)
	case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrNoResponders):
		return fmt.Errorf("queue: send to %q: no stream takes subject %s (is world %q there?); nothing was stored: %w", id, wire.MailboxSubject(q.world, id), q.world, err)
	}
	return &UnknownError{ID: id, MsgID: msgID, Err: err}
}

// answered is the outcome of a publish the broker answered with an
// error: a refusal for the answers that mean nothing was stored
// (NothingStored), else unknown.
func (q *Queue) answered(id, msgID string, apiErr *jetstream.APIError, err error) error {
	switch {
	case !NothingStored(apiErr):
		return &UnknownError{ID: id, MsgID: msgID, Err: err}
	case tooLarge(apiErr):
		return fmt.Errorf("%w: %w", ErrTooLarge, err)
	}
	return fmt.Errorf("queue: send to %q refused by the server, nothing was stored: %w", id, err)
}

// ErrCodeFull is JetStream's "store failed" error (JSStreamStoreFailedF),
// which a stream with DiscardNew answers for a limit it would exceed: on a
// mailbox, a full one (docs/wire.md). Its description is the limit's
// text: fullMsgsText or fullBytesText.
const ErrCodeFull jetstream.ErrorCode = 10077

// The descriptions of ErrCodeFull for the two limits of a mailbox
// stream (nats-server's ErrMaxMsgsPerSubject and ErrMaxBytes).
const (
	fullMsgsText  = "maximum messages per subject exceeded"
	fullBytesText = "maximum bytes exceeded"
)

// AsFull is the *FullError of a publish to id's mailbox that err refused
// for one of the mailbox stream's limits, with the limit it hit; nil when
// err is anything else.
func (q *Queue) AsFull(id string, err error) *FullError {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != ErrCodeFull {
		return nil
	}
	switch {
	case strings.Contains(apiErr.Description, fullBytesText):
		return &FullError{ID: id, Kind: FullBytes, Limit: q.maxBytes, Err: err}
	case strings.Contains(apiErr.Description, fullMsgsText):
		return &FullError{ID: id, Kind: FullMessages, Limit: q.limit, Err: err}
	}
	return nil // another store failure: refused, and not for being full
}
