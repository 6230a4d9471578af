package client

import (
	"context"
	"fmt"

	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/queue"
	"github.com/fencepost/fencepost/worker"
)

// The common paths need this package alone: post with World.Send, serve
// mailboxes with World.NewWorker. The names below are the other packages'
// own, so a program that needs more (drain, ownership) mixes them freely.
type (
	// Message is one delivered message (drain.Message).
	Message = drain.Message
	// Handler processes one message; nil acknowledges it (drain.Handler).
	Handler = drain.Handler
	// CallHandler processes one message and returns the answer to a call
	// (drain.CallHandler; World.Call). Its Handler method gives the
	// Handler a worker takes.
	CallHandler = drain.CallHandler
	// StateHandler processes one message with its id's state, whose writes
	// commit with the message (drain.StateHandler).
	StateHandler = drain.StateHandler
	// State is an id's state as a StateHandler sees it (drain.State).
	State = drain.State
	// WorkerConfig is a worker's settings (worker.Config).
	WorkerConfig = worker.Config
	// Worker serves a world's mailboxes as one node (worker.Worker).
	Worker = worker.Worker
	// SendOption sets a send's sender, idempotency key or headers.
	SendOption = queue.SendOption
	// Posted is a stored message's outcome (queue.Posted).
	Posted = queue.Posted
)

// WithMsgID sets the send's idempotency key, scoped to the id's mailbox
// (queue.WithMsgID).
func WithMsgID(key string) SendOption { return queue.WithMsgID(key) }

// WithFrom sets the sender (queue.WithFrom).
func WithFrom(from string) SendOption { return queue.WithFrom(from) }

// WithHeader adds a header of the sender's own (queue.WithHeader).
func WithHeader(key, value string) SendOption { return queue.WithHeader(key, value) }

// Send posts body into id's mailbox and returns once JetStream stored it,
// whether or not anyone owns id (queue.Queue.Send, with its outcomes).
// It also sees the server's refusals of this connection, which a publish
// does not get as its answer (docs/wire.md "Limits and errors"): a
// refused publish to the mailbox is *NotPermittedError (ErrNotPermitted)
// at once, and nothing was stored; a refused subscription to the
// connection's reply inbox, where the acknowledgement would come, is
// *queue.UnknownError (ErrUnknown) at once, with the refusal as its
// cause: the post may be stored.
func (w *World) Send(ctx context.Context, id string, body []byte, opts ...SendOption) (Posted, error) {
	if w.refusals == nil {
		return w.Queue.Send(ctx, id, body, opts...)
	}
	subj := wire.MailboxSubject(w.Name, id)
	if queue.IsTimer(opts...) {
		subj = wire.TimerIDFilter(w.Name, id) // the timer's subject, whatever its key (timer.go)
	}
	sctx, done := w.refusals.expectWithInbox(ctx, subj, w.inbox)
	p, err := w.Queue.Send(sctx, id, body, opts...)
	if np := done(); err != nil && np != nil && np.Op == "publish" {
		return Posted{}, &SendRefusedError{ID: id, Refusal: np}
	}
	return p, err
}

// SendRefusedError: the server refused this user the publish of a post
// (its permissions): nothing was stored.
type SendRefusedError struct {
	ID      string
	Refusal *NotPermittedError
}

func (e *SendRefusedError) Error() string {
	return fmt.Sprintf("send to %q: %v; nothing was stored", e.ID, e.Refusal)
}

// Unwrap gives the refusal (ErrNotPermitted).
func (e *SendRefusedError) Unwrap() error { return e.Refusal }

// NewWorker returns a worker of this world as cfg.Node, handing every
// message of the ids it holds to h (worker.New). Run it with Run(ctx).
func (w *World) NewWorker(cfg WorkerConfig, h Handler) (*Worker, error) {
	if err := w.Readable(); err != nil {
		return nil, err
	}
	return worker.New(w.World, w.Ownership, cfg, h)
}

// NewStateWorker is NewWorker for a handler with per-id state: each
// message gets its id's state (as of the message before it), and the
// writes the handler stages are committed with the message in one fenced
// atomic batch, so that each message's effect on its id's state is
// applied exactly once, through crashes and takeovers (docs/design.md
// 3.12). cfg.State is set. A world created before per-id state refuses it
// (drain.ErrNoState) until `fencepost world add` is run for it again.
func (w *World) NewStateWorker(cfg WorkerConfig, h StateHandler) (*Worker, error) {
	if err := w.Readable(); err != nil {
		return nil, err
	}
	cfg.State = true
	return worker.New(w.World, w.Ownership, cfg, h.Handler())
}
