package mailbox

import (
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/world"
)

// Admin administers the mailboxes of one world. It is safe for concurrent
// use.
type Admin struct {
	world string
	cfg   world.Config
	js    jetstream.JetStream
	nc    *nats.Conn
	w     *world.World
	own   *ownership.Store
	log   *slog.Logger
}

// New returns the mailbox administration of an open world, using its
// ownership store (owners in Stat and List, the claim DeleteState takes).
func New(w *world.World, own *ownership.Store, opts ...Option) (*Admin, error) {
	h := handles.Of(w)
	a := &Admin{world: w.Name, cfg: w.Config, js: h.JS, nc: h.JS.Conn(), w: w, own: own, log: slog.Default()}
	for _, o := range opts {
		if err := o(a); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// Option configures an Admin.
type Option func(*Admin) error

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option {
	return func(a *Admin) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", ErrInvalidOption)
		}
		a.log = l
		return nil
	}
}

// readBatch is how many messages one direct get of a listing asks for.
const readBatch = 1000
