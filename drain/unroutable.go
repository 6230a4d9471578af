package drain

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/wire"
)

// Sweep is what one SweepUnroutable found.
type Sweep struct {
	Moved   int // messages moved to the world's unroutable dead letters
	Left    int // unroutable messages that could not be moved this time
	Subject int // mailbox subjects whose token is no id's
}

// SweepUnroutable gives every unroutable message a fate. A producer that
// does not follow docs/wire.md can store a message on a mailbox subject
// whose token is not the canonical encoding of any id (padded, another
// alphabet, non-zero trailing bits, invalid UTF-8, over 256 bytes, a
// literal '*'). No id's drain reads that subject, so the message would
// wait forever. The sweep moves each such message, with the reason, to
// wire.UnroutableSubject (listed by Unroutable, counted by stat and the
// metrics), logs a WARN for it, and removes it from the mailbox subject.
//
// The copy is written before the original is removed, and storeDead writes
// it at most once per message, so a sweep that stops midway and runs again
// loses nothing and stores nothing twice. fencepostd runs it for every
// world; it reads the list of the world's mailbox subjects, which costs
// in proportion to the ids with mail.
func (d *Drainer) SweepUnroutable(ctx context.Context) (Sweep, error) {
	var res Sweep
	info, err := d.w.Mailbox.Info(ctx, jetstream.WithSubjectFilter(wire.MailboxFilter(d.world)))
	if err != nil {
		return res, fmt.Errorf("drain: list the mailboxes of %q: %w", d.world, err)
	}
	for subj, n := range info.State.Subjects {
		tok, _ := wire.MailboxToken(d.world, subj)
		_, bad := wire.DecodeID(tok)
		if bad == nil {
			continue
		}
		res.Subject++
		moved, err := d.moveUnroutable(ctx, subj, n, bad)
		res.Moved += moved
		d.metrics.UnroutableMoved(d.world, moved)
		if err != nil {
			res.Left += int(n) - moved
			if ctx.Err() != nil {
				return res, ctx.Err()
			}
			d.log.Warn("drain: cannot move unroutable messages aside; they stay where they are",
				"world", d.world, "subject", subj, "messages", n-uint64(moved), "error", err)
		}
	}
	return res, nil
}

// moveUnroutable moves the n messages of subj to the unroutable dead
// letters. A subject with a wildcard token is read through the wildcard
// filter, keeping only the messages stored under that very subject.
func (d *Drainer) moveUnroutable(ctx context.Context, subj string, n uint64, why error) (int, error) {
	reason := clip(why.Error())
	moved := 0
	for from := uint64(1); uint64(moved) < n; {
		b, err := readBatch(ctx, d.nc, wire.MailboxStream(d.world), subj, from, d.batch)
		if err != nil {
			return moved, err
		}
		for _, m := range b.msgs {
			from = m.Sequence + 1
			if m.Subject != subj {
				continue // another subject matched by a wildcard token
			}
			meta := nats.Header{}
			meta.Set(HeaderDeadSubject, clip(subj))
			meta.Set(HeaderDeadError, "unroutable: "+reason)
			if err := d.storeDead(ctx, wire.UnroutableSubject(d.world), m, meta); err != nil {
				return moved, err
			}
			if err := d.w.Mailbox.DeleteMsg(ctx, m.Sequence); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
				return moved, fmt.Errorf("moved message %d aside but could not remove it: %w", m.Sequence, err)
			}
			moved++
			d.log.Warn("drain: unroutable message moved to the world's dead letters",
				"world", d.world, "subject", subj, "seq", m.Sequence, "reason", reason)
		}
		if len(b.msgs) == 0 || b.pending == 0 {
			break
		}
	}
	return moved, nil
}

// isUnroutableSubject says whether subj is a mailbox subject of the world
// that no id's drain reads.
func isUnroutableSubject(world, subj string) bool {
	tok, ok := wire.MailboxToken(world, subj)
	if !ok {
		return false
	}
	_, err := wire.DecodeID(tok)
	return err != nil
}
