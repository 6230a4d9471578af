package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/mailbox"
	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/queue"
	"github.com/fencepost/fencepost/timer"
	"github.com/fencepost/fencepost/world"
)

// Client is a connection to fencepost's NATS deployment.
type Client struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	opts   options
	ownsNC bool

	refusals refusals
}

// Connect dials url (comma-separated for a cluster) and returns a client.
func Connect(url string, opts ...Option) (*Client, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(url, append([]nats.Option{nats.Name("fencepost")}, o.nats...)...)
	if err != nil {
		return nil, fmt.Errorf("client: connect to %s: %w", url, err)
	}
	c, err := newClient(nc, o)
	if err != nil {
		nc.Close()
		return nil, err
	}
	c.ownsNC = true
	return c, nil
}

// New wraps an existing connection; Close leaves it open.
func New(nc *nats.Conn, opts ...Option) (*Client, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	return newClient(nc, o)
}

func buildOptions(opts []Option) (options, error) {
	o := options{timeout: DefaultTimeout, log: slog.Default()}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return options{}, err
		}
	}
	return o, nil
}

func newClient(nc *nats.Conn, o options) (*Client, error) {
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(o.timeout))
	if err != nil {
		return nil, fmt.Errorf("client: jetstream: %w", err)
	}
	c := &Client{nc: nc, js: js, opts: o}
	c.refusals.hook(nc)
	return c, nil
}

// Conn is the underlying NATS connection.
func (c *Client) Conn() *nats.Conn { return c.nc }

// JetStream is the underlying JetStream context.
func (c *Client) JetStream() jetstream.JetStream { return c.js }

// Close closes the connection if Connect opened it. It is idempotent.
func (c *Client) Close() {
	if c.ownsNC {
		c.nc.Close()
	}
}

// World is an open world and its stores.
//
// A World opened by a user that may post but not read the world's streams
// (a producer under fencepostd --auth) is open for posting only: Send and
// Queue work; Ownership, Drainer and Mailboxes are nil (the embedded
// world is PostOnly); Readable says why.
type World struct {
	*world.World
	Ownership *ownership.Store
	Queue     *queue.Queue   // send into mailboxes
	Drainer   *drain.Drainer // deliver: drain, drain all, hold
	// Mailboxes administers the mailboxes: stat, list, dead letters,
	// repost, an id's stored state.
	Mailboxes *mailbox.Admin
	// Timers lists, counts and cancels the world's pending timers (set
	// with Send and WithAt or WithAfter).
	Timers *timer.Timers

	refused *NotPermittedError // open for posting only: the server's refusal of the stream info

	refusals *refusals  // the client's, for Send
	inbox    string     // the connection's reply inbox prefix, with its trailing '.'
	nc       *nats.Conn // the client's connection (calls wait for answers on it)
}

// ErrPostOnly is wrapped by Readable's error: the world is open for posting
// only.
var ErrPostOnly = errors.New("client: world open for posting only")

// Readable is nil when the world was opened in full. For a world open for
// posting only it is an error that wraps ErrPostOnly and the server's
// refusal (a *NotPermittedError, ErrNotPermitted): the user may not read
// the world's streams, so it can post and nothing else.
func (w *World) Readable() error {
	if w.refused == nil {
		return nil
	}
	return &PostOnlyError{World: w.Name, Refusal: w.refused}
}

// PostOnlyError says that a world is open for posting only, and why: the
// server refused the user the world's stream info.
type PostOnlyError struct {
	World   string
	Refusal *NotPermittedError
}

func (e *PostOnlyError) Error() string {
	return fmt.Sprintf("%v; this user may only post into world %q", e.Refusal, e.World)
}

// Unwrap gives ErrPostOnly and the refusal.
func (e *PostOnlyError) Unwrap() []error { return []error{ErrPostOnly, e.Refusal} }

// World opens an existing world (world.ErrUnknownWorld if there is none).
//
// When the server refuses this user the stream info of the world's bucket
// (a producer under fencepostd --auth: stream info could list every id and
// key, docs/security.md), the world is opened for posting only, from its
// settings entry (world.OpenToPost): Send works, Readable says the rest
// does not.
func (c *Client) World(ctx context.Context, name string) (*World, error) {
	if err := wire.ValidateWorld(name); err != nil {
		return nil, err
	}
	octx, done := c.refusals.expect(ctx, jsapi.APIStreamInfo+wire.BucketStream(name))
	w, err := world.Open(octx, c.js, name)
	refused := done()
	if err == nil {
		return c.bind(w)
	}
	if refused == nil {
		return nil, err
	}
	pw, perr := world.OpenToPost(ctx, c.js, name)
	if perr != nil {
		return nil, fmt.Errorf("%w; opening world %q for posting only: %w", refused, name, perr)
	}
	return &World{World: pw, Queue: queue.New(pw), Timers: timer.New(pw), refused: refused, refusals: &c.refusals, inbox: c.inbox(), nc: c.nc}, nil
}

// CreateWorld creates a world (or opens it, if it exists with the same
// settings).
func (c *Client) CreateWorld(ctx context.Context, name string, cfg world.Config) (*World, error) {
	w, err := world.Create(ctx, c.js, name, cfg)
	if err != nil {
		return nil, err
	}
	return c.bind(w)
}

func (c *Client) bind(w *world.World) (*World, error) {
	own, err := ownership.New(w, append([]ownership.Option{ownership.WithLogger(c.opts.log), ownership.WithMetrics(c.opts.metrics), ownership.WithRefusals(c.expectRefusal)}, c.opts.ownership...)...)
	if err != nil {
		return nil, err
	}
	dr, err := drain.New(w, own, drain.WithLogger(c.opts.log), drain.WithMetrics(c.opts.metrics))
	if err != nil {
		return nil, err
	}
	mb, err := mailbox.New(w, own, mailbox.WithLogger(c.opts.log))
	if err != nil {
		return nil, err
	}
	return &World{World: w, Ownership: own, Queue: queue.New(w), Drainer: dr, Mailboxes: mb, Timers: timer.New(w), refusals: &c.refusals, inbox: c.inbox(), nc: c.nc}, nil
}

// inbox is the prefix of the connection's reply subjects, with its
// trailing '.': every request's answer, a post's acknowledgement too,
// comes to a subject under it.
func (c *Client) inbox() string {
	if p := c.nc.Opts.InboxPrefix; p != "" {
		return p + "."
	}
	return nats.InboxPrefix
}

// ResetWorld drops every record, epoch and mailbox of a world.
func (c *Client) ResetWorld(ctx context.Context, name string) error {
	return world.Reset(ctx, c.js, name)
}

// RemoveWorld deletes a world.
func (c *Client) RemoveWorld(ctx context.Context, name string) error {
	return world.Remove(ctx, c.js, name)
}

// Worlds lists the worlds.
func (c *Client) Worlds(ctx context.Context) ([]string, error) {
	return world.List(ctx, c.js)
}
