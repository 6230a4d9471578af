package client

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
)

// ErrNotPermitted is wrapped by every NotPermittedError.
var ErrNotPermitted = errors.New("client: not permitted")

// NotPermittedError says that the server refused a publish or a
// subscription of this client: the NATS user's permissions do not allow
// the subject (with fencepostd --auth, the role's; docs/security.md).
type NotPermittedError struct {
	Op      string // "publish" or "subscription"
	Subject string
}

func (e *NotPermittedError) Error() string {
	return fmt.Sprintf("not permitted: the server refused %s to %q: this user's permissions do not allow it (docs/security.md)", e.Op, e.Subject)
}

func (e *NotPermittedError) Unwrap() error { return ErrNotPermitted }

// The server's text of a refusal: Permissions Violation for Publish to "x".
var violationRe = regexp.MustCompile(`Permissions Violation for (Publish|Subscription) to "([^"]+)"`)

// refusals hands the server's permission violations to the functions
// watching for them. NATS reports a refused publish asynchronously (a
// request just gets no reply), so without this an operation that is not
// permitted would end with a timeout.
type refusals struct {
	mu       sync.Mutex
	next     int
	watchers map[int]func(*NotPermittedError)
	expected map[int]*expectation
}

// expectation is a refusal an operation is ready for: the first refusal
// of a publish to subject goes to it alone, not to the watchers. With
// inbox set, a refusal of a subscription under that prefix (the reply
// inbox its answer would come to) goes to it too, and on to the
// watchers: every request waiting on the inbox is concerned.
type expectation struct {
	subject string
	inbox   string
	got     *NotPermittedError
	cancel  context.CancelCauseFunc
}

// hook chains the client's handler before the connection's error handler.
// A refusal that an operation of the client expected and handles (see
// expect) does not reach the connection's error handler.
func (r *refusals) hook(nc *nats.Conn) {
	prev := nc.Opts.AsyncErrorCB
	nc.SetErrorHandler(func(nc *nats.Conn, sub *nats.Subscription, err error) {
		if m := violationRe.FindStringSubmatch(err.Error()); m != nil && errors.Is(err, nats.ErrPermissionViolation) {
			op := "publish"
			if m[1] == "Subscription" {
				op = "subscription"
			}
			if r.refused(&NotPermittedError{Op: op, Subject: m[2]}) {
				return
			}
		}
		if prev != nil {
			prev(nc, sub, err)
		}
	})
}

// refused hands e to the operation expecting it, or else to the watchers;
// it says whether an operation expected it. A refused reply inbox goes
// to every operation waiting on it and to the watchers.
func (r *refusals) refused(e *NotPermittedError) (expected bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, x := range r.expected {
		if x.got == nil && subjectMatches(x.subject, e.Subject) && e.Op == "publish" {
			x.got = e
			x.cancel(e)
			return true
		}
	}
	for _, x := range r.expected {
		if x.got == nil && x.inbox != "" && e.Op == "subscription" && strings.HasPrefix(e.Subject, x.inbox) {
			x.got = e
			x.cancel(e)
			expected = true
		}
	}
	for _, fn := range r.watchers {
		fn(e)
	}
	return expected
}

// subjectMatches says whether an expectation's subject, which may end in
// a "*" token (a timer's subject, whatever its key), matches a refused
// publish's.
func subjectMatches(expected, subject string) bool {
	prefix, wild := strings.CutSuffix(expected, ".*")
	if !wild {
		return expected == subject
	}
	last, ok := strings.CutPrefix(subject, prefix+".")
	return ok && last != "" && !strings.Contains(last, ".")
}

// OnRefusal calls fn with every refusal of a publish or subscription of
// this client by the server, until stop is called. fn must not block.
func (c *Client) OnRefusal(fn func(*NotPermittedError)) (stop func()) {
	r := &c.refusals
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.watchers == nil {
		r.watchers = map[int]func(*NotPermittedError){}
	}
	id := r.next
	r.next++
	r.watchers[id] = fn
	return func() {
		r.mu.Lock()
		delete(r.watchers, id)
		r.mu.Unlock()
	}
}

// Refusable returns a context for one operation that the server's refusal
// of any publish or subscription of this client ends at once, with a
// *NotPermittedError as its cause, and done, which the operation's error
// goes through: it returns that refusal instead of the context's error
// when there was one, and releases the context.
//
// The server's refusal names the subject but not the request, so a
// refusal ends every Refusable context of the client that is open at that
// moment: it is meant for clients that do one operation at a time, such
// as the fencepost command line.
func (c *Client) Refusable(ctx context.Context) (_ context.Context, done func(error) error) {
	ctx, cancel := context.WithCancelCause(ctx)
	stop := c.OnRefusal(func(e *NotPermittedError) { cancel(e) })
	return ctx, func(err error) error {
		stop()
		var np *NotPermittedError
		if err != nil && errors.As(context.Cause(ctx), &np) {
			err = np
		}
		cancel(nil)
		return err
	}
}

// expect returns a context that the server's refusal of a publish to
// subject ends, and done, which ends the expectation and returns that
// refusal, or nil. The refusal is the expecting operation's: it is not
// handed to OnRefusal's watchers (nor ends Refusable contexts), because
// the operation goes on another way.
func (r *refusals) expect(ctx context.Context, subject string) (context.Context, func() *NotPermittedError) {
	return r.expectWithInbox(ctx, subject, "")
}

// expectWithInbox is expect that also ends the context, with the refusal
// as its cause, at a refusal of a subscription whose subject starts with
// inbox (the connection's reply inbox, "_INBOX."): the answer cannot
// come.
func (r *refusals) expectWithInbox(ctx context.Context, subject, inbox string) (context.Context, func() *NotPermittedError) {
	ctx, cancel := context.WithCancelCause(ctx)
	x := &expectation{subject: subject, inbox: inbox, cancel: cancel}
	r.mu.Lock()
	if r.expected == nil {
		r.expected = map[int]*expectation{}
	}
	id := r.next
	r.next++
	r.expected[id] = x
	r.mu.Unlock()
	return ctx, func() *NotPermittedError {
		r.mu.Lock()
		delete(r.expected, id)
		got := x.got
		r.mu.Unlock()
		cancel(nil)
		return got
	}
}

// expectRefusal is refusals.expect for package ownership
// (ownership.WithRefusals): a refused retire of another node's lease is
// known at once, and not reported to the watchers or the connection's
// error handler, because the operation reads again and goes on.
func (c *Client) expectRefusal(ctx context.Context, subject string) (context.Context, func() error) {
	ctx, done := c.refusals.expect(ctx, subject)
	return ctx, func() error {
		if np := done(); np != nil {
			return np
		}
		return nil
	}
}
