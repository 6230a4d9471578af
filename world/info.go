package world

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/wire"
)

// Info is what a world holds, read from its streams: its settings, the
// state of both streams, and the mailbox counts derived from them. With
// ownership.Store.CountRecords (the records, judged by the package that
// owns them) it is what `fencepost world info` prints and what fencepostd
// publishes as metrics.
type Info struct {
	Name    string
	Config  Config
	Bucket  jetstream.StreamState // ownership records, cursors, locks, node leases
	Mailbox jetstream.StreamState // mailboxes and dead letters

	// Depth counts the messages stored in mailboxes (dead letters
	// excluded), as the stream's counts give it: committed messages whose
	// purge has not run yet included. mailbox.Admin.WorldStat counts from
	// each id's cursor instead.
	Depth       uint64
	Mailboxes   uint64        // ids whose mailbox holds messages
	DeadLetters uint64        // dead letters in dead-letter stores (a two-part one once)
	DeadIDs     uint64        // ids with dead letters
	Unroutable  uint64        // messages moved to the unroutable dead letters (purge.Purger.FollowUnroutable)
	Oldest      time.Time     // posting time of the oldest mailbox message; zero when empty
	OldestAge   time.Duration // now - Oldest; 0 when empty
}

// InspectOptions tune Inspect.
type InspectOptions struct {
	// Now is the time OldestAge is measured at; zero means time.Now().
	Now time.Time
}

// Inspect reads a world's state (ErrUnknownWorld if there is none).
func Inspect(ctx context.Context, js jetstream.JetStream, name string, opts InspectOptions) (Info, error) {
	w, err := Open(ctx, js, name)
	if err != nil {
		return Info{}, err
	}
	return w.Inspect(ctx, opts)
}

// Inspect reads the open world's state (the package function, for a world
// the caller has open already).
func (w *World) Inspect(ctx context.Context, opts InspectOptions) (Info, error) {
	if opts.Now.IsZero() {
		opts.Now = time.Now()
	}
	info := Info{Name: w.Name, Config: w.Config}
	bi, err := w.h.Bucket.Info(ctx)
	if err != nil {
		return Info{}, fmt.Errorf("world %q: bucket stream info: %w", w.Name, err)
	}
	info.Bucket = bi.State
	if err := info.mailboxCounts(ctx, w, opts.Now); err != nil {
		return Info{}, err
	}
	return info, nil
}

// mailboxCounts fills the mailbox figures: stream state, dead letters (per
// subject state of the dead-letter filter, usually small) and the oldest
// mailbox message (one get of the first message on the mailbox filter).
func (info *Info) mailboxCounts(ctx context.Context, w *World, now time.Time) error {
	mi, err := w.h.Mailbox.Info(ctx, jetstream.WithSubjectFilter(wire.DeadLetterFilter(w.Name)))
	if err != nil {
		return fmt.Errorf("world %q: mailbox stream info: %w", w.Name, err)
	}
	info.Mailbox = mi.State
	c := CountMailboxes(w.Name, mi.State)
	info.Depth, info.Mailboxes, info.DeadLetters, info.DeadIDs, info.Unroutable = c.Depth, c.Mailboxes, c.DeadLetters, c.DeadIDs, c.Unroutable
	info.Mailbox.Subjects = nil
	if info.Depth == 0 {
		return nil
	}
	// Read with jsapi's direct get: the time is the server's
	// Nats-Time-Stamp, the last of that name (a publisher may have sent
	// one of its own, which nats.go's GetMsg would read).
	b, err := jsapi.DirectGet(ctx, w.h.JS.Conn(), wire.MailboxStream(w.Name), jsapi.GetRequest{Seq: info.Mailbox.FirstSeq, NextFor: w.storedMailboxFilter(), Batch: 1})
	if err != nil {
		return fmt.Errorf("world %q: oldest mailbox message: %w", w.Name, err)
	}
	if len(b.Msgs) == 0 {
		return nil // drained since the stream info
	}
	m := b.Msgs[0]
	info.Oldest = m.Time
	info.OldestAge = max(now.Sub(m.Time), 0)
	return nil
}

// MailboxCounts are a world's mailbox figures, counted without listing
// every mailbox subject.
type MailboxCounts struct {
	Depth       uint64 // messages in mailboxes (dead letters excluded)
	Mailboxes   uint64 // subjects with messages that are not dead letters
	DeadLetters uint64 // dead letters in the ids' dead-letter stores
	DeadIDs     uint64 // ids with dead letters
	Unroutable  uint64 // messages moved to the unroutable dead letters
	// DeadParts counts the body parts of dead letters stored in two
	// parts (wire.PartSubject): each belongs to a dead letter counted
	// above, and is neither a dead letter nor mail.
	DeadParts uint64
}

// CountMailboxes counts from the mailbox stream's state read with the
// dead-letter subjects listed (WithSubjectFilter(wire.DeadLetterFilter)):
// the stream's message and subject totals, less the dead letters and
// their body parts. A message waiting on a subject no id can drain counts
// as a mailbox's. Depth counts every message stored in a mailbox, the
// committed ones whose purge has not run included: the stream's counts
// cannot tell them apart (mailbox.Admin.WorldStat can).
func CountMailboxes(world string, st jetstream.StreamState) MailboxCounts {
	var c MailboxCounts
	var other uint64 // subjects that are not mailboxes or ids' dead letters
	for subj, n := range st.Subjects {
		tok, _ := wire.DeadLetterToken(world, subj)
		switch {
		case wire.IsPartToken(tok):
			c.DeadParts += n
			other++
		case tok == wire.UnroutableToken:
			c.Unroutable += n
			other++
		default:
			c.DeadLetters += n
			c.DeadIDs++
		}
	}
	c.Depth = sub(st.Msgs, c.DeadLetters+c.Unroutable+c.DeadParts)
	c.Mailboxes = sub(uint64(st.NumSubjects), c.DeadIDs+other)
	return c
}

func sub(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}

// MailboxIDs returns the ids whose mailboxes hold messages, with how many
// each holds (committed messages the purger has not removed yet included;
// dead letters and unroutable subjects excluded).
func (w *World) MailboxIDs(ctx context.Context) (map[string]uint64, error) {
	info, err := w.h.Mailbox.Info(ctx, jetstream.WithSubjectFilter(w.storedMailboxFilter()))
	if err != nil {
		return nil, fmt.Errorf("world %q: mailbox stream: %w", w.Name, err)
	}
	ids := make(map[string]uint64, len(info.State.Subjects))
	for subj, n := range info.State.Subjects {
		if id, err := w.storedMailboxID(subj); err == nil && n > 0 {
			ids[id] = n
		}
	}
	return ids, nil
}

// Created is when the world's bucket was created: a world removed and
// added again under its name has another.
func (w *World) Created() time.Time {
	if w.h.Bucket == nil {
		return time.Time{}
	}
	return w.h.Bucket.CachedInfo().Created
}

// storedMailboxFilter matches every mailbox message the world stores: on
// the subjects posted to in a per-id world; under their shards in a
// sharded one (the stream's transform: wire.ShardMailboxSubject).
func (w *World) storedMailboxFilter() string {
	if w.Config.Shards > 0 {
		return wire.ShardedMailboxFilter(w.Name)
	}
	return wire.MailboxFilter(w.Name)
}

// storedMailboxID is the id of a stored mailbox subject of the world
// (storedMailboxFilter).
func (w *World) storedMailboxID(subj string) (string, error) {
	if w.Config.Shards > 0 {
		id, _, _, err := wire.ShardedID(w.Name, subj, w.Config.Shards)
		return id, err
	}
	return wire.MailboxID(w.Name, subj)
}
