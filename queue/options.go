package queue

import (
	"github.com/nats-io/nats.go"
)

// SendOption sets a property of one message.
type SendOption func(*sendOptions)

type sendOptions struct {
	from    string
	msgID   string
	headers nats.Header
	timer   timerOpts // WithAt, WithAfter, WithTimerKey (timer.go)
	replyTo string
}

// WithFrom names the sender (header Fencepost-From).
func WithFrom(from string) SendOption { return func(o *sendOptions) { o.from = from } }

// WithMsgID sets the dedupe key of the message: a second message with the
// same key to the same id inside the world's dedupe window is not stored
// again, and Send reports the first one's sequence with Duplicate set. The
// key's scope is the id's mailbox: the same key posted to two ids stores
// both. On the wire it is the header Nats-Msg-Id: <encoded id>:<key>
// (docs/wire.md "Duplicates").
func WithMsgID(id string) SendOption { return func(o *sendOptions) { o.msgID = id } }

// WithReplyTo makes the message a call (package call): its holder answers
// it on subject (header Fencepost-Reply-To), which must be a literal
// subject under "_INBOX." (call.CheckSubject). client.World.Call sets it
// and waits for the answer.
func WithReplyTo(subject string) SendOption { return func(o *sendOptions) { o.replyTo = subject } }

// MsgIDOf is the message id that opts set (WithMsgID), "" if none.
func MsgIDOf(opts ...SendOption) string {
	var o sendOptions
	for _, opt := range opts {
		opt(&o)
	}
	return o.msgID
}

// WithHeader adds a caller header; the handler sees it in Message.Headers.
// Names starting with "Nats-" or "Fencepost-" are reserved.
func WithHeader(key, value string) SendOption {
	return func(o *sendOptions) {
		if o.headers == nil {
			o.headers = nats.Header{}
		}
		o.headers.Add(key, value)
	}
}
