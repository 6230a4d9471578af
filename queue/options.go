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
}

// WithFrom names the sender (header Fencepost-From).
func WithFrom(from string) SendOption { return func(o *sendOptions) { o.from = from } }

// WithMsgID sets the dedupe key (header Nats-Msg-Id): a second message with
// the same id inside the world's dedupe window is not stored again, and
// Send reports the first one's sequence with Duplicate set.
func WithMsgID(id string) SendOption { return func(o *sendOptions) { o.msgID = id } }

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
