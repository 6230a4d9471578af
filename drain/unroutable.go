package drain

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/handles"
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
	info, err := handles.Of(d.w).Mailbox.Info(ctx, jetstream.WithSubjectFilter(wire.MailboxFilter(d.world)))
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
			if err := d.moveAside(ctx, m, reason); err != nil {
				return moved, err
			}
			moved++
		}
		if len(b.msgs) == 0 || b.pending == 0 {
			break
		}
	}
	return moved, nil
}

// moveAside moves one unroutable message m to the world's unroutable dead
// letters (written at most once, then removed from the mailbox stream).
func (d *Drainer) moveAside(ctx context.Context, m *jetstream.RawStreamMsg, reason string) error {
	meta := nats.Header{}
	meta.Set(HeaderDeadSubject, clip(m.Subject))
	meta.Set(HeaderDeadError, "unroutable: "+reason)
	if err := d.storeDead(ctx, wire.UnroutableSubject(d.world), m, meta); err != nil {
		return err
	}
	if err := handles.Of(d.w).Mailbox.DeleteMsg(ctx, m.Sequence); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return fmt.Errorf("moved message %d aside but could not remove it: %w", m.Sequence, err)
	}
	d.log.Warn("drain: unroutable message moved to the world's dead letters",
		"world", d.world, "subject", m.Subject, "seq", m.Sequence, "reason", reason)
	return nil
}

// FollowUnroutable gives every unroutable message a fate as it is stored,
// as SweepUnroutable does, until ctx ends: it reads the world's mailbox
// stream from its first message on with one ordered consumer of headers
// only, and moves each message whose subject encodes no id. It costs a
// header read per message posted, where a sweep costs a listing of every
// mailbox subject each time it runs (fencepostd swept every world every
// 10 s: with 200,000 ids with mail, a 200,000-entry listing). Each start
// reads every stored message's headers, about 1.1 KB of garbage per
// message, which fencepostd returns once quiet (docs/design.md 3.11). A
// message it cannot move is logged and left; the next start of the
// follower tries again.
func (d *Drainer) FollowUnroutable(ctx context.Context) error {
	cons, err := handles.Of(d.w).Mailbox.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{wire.MailboxFilter(d.world)},
		HeadersOnly:    true,
	})
	if err != nil {
		return fmt.Errorf("drain: follow the mailboxes of %q: %w", d.world, err)
	}
	type bad struct {
		seq    uint64
		reason string
	}
	found := make(chan bad, 1024)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		tok, _ := wire.MailboxToken(d.world, m.Subject())
		_, why := wire.DecodeID(tok)
		if why == nil {
			return
		}
		meta, err := m.Metadata()
		if err != nil {
			return
		}
		select {
		case found <- bad{meta.Sequence.Stream, why.Error()}:
		case <-ctx.Done():
		}
	})
	if err != nil {
		return fmt.Errorf("drain: follow the mailboxes of %q: %w", d.world, err)
	}
	defer cc.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-cc.Closed():
			return fmt.Errorf("drain: following the mailboxes of %q stopped", d.world)
		case b := <-found:
			m, err := handles.Of(d.w).Mailbox.GetMsg(ctx, b.seq)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				continue // moved or removed already
			}
			if err == nil {
				err = d.moveAside(ctx, m, b.reason)
			}
			if err == nil {
				d.metrics.UnroutableMoved(d.world, 1)
				continue
			}
			if ctx.Err() != nil {
				return nil
			}
			d.log.Warn("drain: cannot move an unroutable message aside; it stays where it is",
				"world", d.world, "seq", b.seq, "error", err)
		}
	}
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
