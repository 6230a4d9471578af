package client

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/fencepost/fencepost/call"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/queue"
)

// Sentinel outcomes of a call (docs/contract.md section 11).
var (
	// ErrCallFailed: the call was dead-lettered after the world's
	// max_deliveries; CallFailedError names the last handler error.
	ErrCallFailed = errors.New("client: call failed")
	// ErrCallTimeout: no answer came in time. An unknown outcome: the
	// call may be stored and be handled later (CallTimeoutError).
	ErrCallTimeout = errors.New("client: call timed out")
)

// Answer is a call's outcome replied: its holder handled and committed the
// message and answered.
type Answer struct {
	ID  string
	Seq uint64 // the call's sequence in the world's mailbox stream
	// Body is the handler's answer (Message.Reply, CallHandler; a
	// --exec command's stdout); empty when it gave none.
	Body []byte
	// Duplicate: the post was a duplicate of an earlier one with the same
	// message id (a retry), whose answer this is.
	Duplicate bool
}

// CallFailedError: the call was moved to the id's dead letters after the
// world's max_deliveries; Err is the last handler error.
type CallFailedError struct {
	ID  string
	Seq uint64
	Err string
}

func (e *CallFailedError) Error() string {
	return fmt.Sprintf("call to %q (seq %d) failed: dead-lettered after the world's max_deliveries: %s", e.ID, e.Seq, e.Err)
}

// Is matches ErrCallFailed.
func (e *CallFailedError) Is(target error) bool { return target == ErrCallFailed }

// CallTimeoutError: no answer came before the call's context ended. The
// outcome is unknown: when Posted, the call is stored and stays in the
// mailbox, and its holder may handle it later (it is never lost). A retry
// with the same message id (WithMsgID) inside the world's dedupe window
// is not stored again, runs no handler again, and waits for the first
// post's answer: it gets it if that is sent after the retry began
// waiting.
type CallTimeoutError struct {
	ID        string
	MsgID     string // the call's message id, "" if none
	Posted    bool   // the post was stored (Seq); false: not known
	Seq       uint64
	Duplicate bool  // the post was a duplicate of an earlier call's
	Err       error // what ended the wait, or the post's unknown outcome
}

func (e *CallTimeoutError) Error() string {
	what := "the post's outcome is unknown"
	if e.Posted {
		what = fmt.Sprintf("the call is stored (seq %d) and may still be handled", e.Seq)
	}
	hint := "read the mailbox (stat) before calling again: without a message id a retry is a second call"
	if e.MsgID != "" {
		hint = fmt.Sprintf("call again with the same message id %q: it is not stored twice, and waits for the answer", e.MsgID)
	}
	return fmt.Sprintf("call to %q: no answer in time (%v); %s; %s", e.ID, e.Err, what, hint)
}

// Is matches ErrCallTimeout.
func (e *CallTimeoutError) Is(target error) bool { return target == ErrCallTimeout }

// Unwrap gives what ended the wait.
func (e *CallTimeoutError) Unwrap() error { return e.Err }

// Call posts body into id's mailbox as a call and waits, until ctx ends,
// for the answer of the id's holder, which it sends once the commit
// covering the message was accepted (docs/contract.md section 11). The
// post is a Send: durable, in order with the id's other mail, delivered
// only to the holder, with Send's options and refusals (*FullError,
// *TooLargeError, ... : nothing was stored). The outcomes:
//
//   - Answer: replied, with the handler's answer;
//   - *CallFailedError (ErrCallFailed): dead-lettered after the world's
//     max_deliveries, with the last handler error;
//   - *CallTimeoutError (ErrCallTimeout): no answer in time, an unknown
//     outcome; the call stays in the mailbox and may be handled later.
//
// The answer comes to a subject under the connection's inbox prefix
// (call.Subject: derived from the id and the message id when WithMsgID is
// given, so that a retry waits where the first post's answer goes).
// Answers are at least once; Call takes the first.
func (w *World) Call(ctx context.Context, id string, body []byte, opts ...SendOption) (Answer, error) {
	if err := wire.ValidateID(id); err != nil {
		return Answer{}, err
	}
	prefix := strings.TrimSuffix(w.inbox, ".")
	if prefix == "" {
		prefix = strings.TrimSuffix(call.InboxPrefix, ".")
	}
	if !strings.HasPrefix(prefix+".", call.InboxPrefix) {
		return Answer{}, fmt.Errorf("%w: calls are answered under %q, and this connection's inbox prefix is %q", ErrInvalidOption, call.InboxPrefix, prefix)
	}
	msgID := queue.MsgIDOf(opts...)
	subj := call.Subject(prefix, w.Name, id, msgID)
	nc := w.nc
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var done func() *NotPermittedError
	if w.refusals != nil {
		// A refused post is known at once; a refused subscription of the
		// reply subject too: no answer can come.
		ctx, done = w.refusals.expectWithInbox(ctx, wire.MailboxSubject(w.Name, id), prefix+".")
	}
	refusal := func() *NotPermittedError {
		if done == nil {
			return nil
		}
		np := done()
		done = nil
		return np
	}
	defer refusal()
	// Subscribed before the post: the answer may come at once.
	sub, err := nc.SubscribeSync(subj)
	if err != nil {
		return Answer{}, fmt.Errorf("call to %q: subscribe to its reply subject %s: %w", id, subj, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	p, err := w.Queue.Send(ctx, id, body, append(append([]SendOption(nil), opts...), queue.WithReplyTo(subj))...)
	if err != nil {
		var unknown *queue.UnknownError
		if np := refusal(); np != nil && np.Op == "publish" {
			return Answer{}, &SendRefusedError{ID: id, Refusal: np}
		} else if errors.As(err, &unknown) {
			if np != nil {
				err = np
			}
			return Answer{}, &CallTimeoutError{ID: id, MsgID: msgID, Err: err}
		}
		return Answer{}, err
	}
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			if np := refusal(); np != nil {
				err = np
			} else if ctx.Err() != nil {
				err = context.Cause(ctx)
			}
			return Answer{}, &CallTimeoutError{ID: id, MsgID: msgID, Posted: true, Seq: p.Seq, Duplicate: p.Duplicate, Err: err}
		}
		r, err := call.Parse(m)
		if err != nil || r.Seq != p.Seq {
			// Not an answer to this post: a stray message, or the answer
			// to an earlier post with the same message id outside the
			// dedupe window.
			continue
		}
		if r.Failed {
			return Answer{}, &CallFailedError{ID: id, Seq: r.Seq, Err: string(r.Body)}
		}
		return Answer{ID: id, Seq: r.Seq, Body: r.Body, Duplicate: p.Duplicate}, nil
	}
}
