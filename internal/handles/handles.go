// Package handles gives fencepost's own packages the JetStream handles
// behind an open world: its bucket (as a key-value store and as a stream),
// its mailbox stream, and the JetStream context it was opened with.
//
// world.World keeps them unexported, so that a program using fencepost
// works through typed operations (client, world, drain, ownership, queue)
// and never reaches into the streams behind them. The packages that are
// the storage layer get them here: Of(w).KV. A program outside this module
// cannot import this package, so it can neither name a Key nor call
// World.Handles (world exposes typed operations, not JetStream handles:
// docs/design.md, the map).
package handles

import "github.com/nats-io/nats.go/jetstream"

// Handles are the JetStream handles behind an open world. A world open for
// posting only (world.OpenToPost) has JS alone.
type Handles struct {
	KV      jetstream.KeyValue  // ownership records, cursors, locks, node leases, state
	Bucket  jetstream.Stream    // the stream behind KV
	Mailbox jetstream.Stream    // mailboxes and dead letters
	JS      jetstream.JetStream // the context the world was opened with
	// Timers: the world has its timer stream (pending timers and their
	// fired copies), which the mailbox stream sources; false for a world
	// made before timers. Known from the mailbox stream's config, with no
	// request of its own (a user may not read the timer stream).
	Timers bool
}

// Key is the argument of World.Handles. Its field is unexported, so only
// code that imports this package can make one.
type Key struct{ _ struct{} }

// Opened is an open world: *world.World, or a type that embeds it.
type Opened interface {
	Handles(Key) *Handles
}

// Of returns w's handles.
func Of(w Opened) *Handles { return w.Handles(Key{}) }
