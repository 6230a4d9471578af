package client

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/queue"
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
type World struct {
	*world.World
	Ownership *ownership.Store
	Queue     *queue.Queue   // send into mailboxes (World.Mailbox is the stream)
	Drainer   *drain.Drainer // drain, dead letters, stat
}

// World opens an existing world (world.ErrUnknownWorld if there is none).
func (c *Client) World(ctx context.Context, name string) (*World, error) {
	w, err := world.Open(ctx, c.js, name)
	if err != nil {
		return nil, err
	}
	return c.bind(w)
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
	own, err := ownership.New(w, append([]ownership.Option{ownership.WithLogger(c.opts.log), ownership.WithMetrics(c.opts.metrics)}, c.opts.ownership...)...)
	if err != nil {
		return nil, err
	}
	dr, err := drain.New(w, own, drain.WithLogger(c.opts.log), drain.WithMetrics(c.opts.metrics))
	if err != nil {
		return nil, err
	}
	return &World{World: w, Ownership: own, Queue: queue.New(w), Drainer: dr}, nil
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
