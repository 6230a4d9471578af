package purge

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/store"
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
// The copy is written before the original is removed, and store.WriteDead writes
// it at most once per message, so a sweep that stops midway and runs again
// loses nothing and stores nothing twice. fencepostd runs it for every
// world; it reads the list of the world's mailbox subjects, which costs
// in proportion to the ids with mail.
func (p *Purger) SweepUnroutable(ctx context.Context) (Sweep, error) {
	var res Sweep
	info, err := handles.Of(p.w).Mailbox.Info(ctx, jetstream.WithSubjectFilter(wire.MailboxSweepFilter(p.world)))
	if err != nil {
		return res, fmt.Errorf("purge: list the mailboxes of %q: %w", p.world, err)
	}
	for subj, n := range info.State.Subjects {
		tok, _ := wire.MailboxToken(p.world, subj)
		_, bad := wire.DecodeID(tok)
		if bad == nil {
			continue
		}
		res.Subject++
		moved, err := p.moveUnroutable(ctx, subj, n, bad)
		res.Moved += moved
		p.metrics.UnroutableMoved(p.world, moved)
		if err != nil {
			res.Left += int(n) - moved
			if ctx.Err() != nil {
				return res, ctx.Err()
			}
			p.log.Warn("purge: cannot move unroutable messages aside; they stay where they are",
				"world", p.world, "subject", subj, "messages", n-uint64(moved), "error", err)
		}
	}
	return res, nil
}

// moveUnroutable moves the n messages of subj to the unroutable dead
// letters. A subject with a wildcard token is read through the wildcard
// filter, keeping only the messages stored under that very subject.
func (p *Purger) moveUnroutable(ctx context.Context, subj string, n uint64, why error) (int, error) {
	reason := store.Clip(why.Error())
	moved := 0
	for from := uint64(1); uint64(moved) < n; {
		b, err := jsapi.DirectGet(ctx, p.nc, wire.MailboxStream(p.world), jsapi.GetRequest{Seq: from, NextFor: subj, Batch: readBatch})
		if err != nil {
			return moved, err
		}
		for _, m := range b.Msgs {
			from = m.Sequence + 1
			if m.Subject != subj {
				continue // another subject matched by a wildcard token
			}
			if err := p.moveAside(ctx, m, reason); err != nil {
				return moved, err
			}
			moved++
		}
		if len(b.Msgs) == 0 || b.Pending == 0 {
			break
		}
	}
	return moved, nil
}

// moveAside moves one unroutable message m to the world's unroutable dead
// letters (written at most once, then removed from the mailbox stream).
func (p *Purger) moveAside(ctx context.Context, m *jetstream.RawStreamMsg, reason string) error {
	meta := nats.Header{}
	meta.Set(wire.HeaderDeadSubject, store.Clip(m.Subject))
	meta.Set(wire.HeaderDeadError, "unroutable: "+reason)
	if err := store.WriteDead(ctx, p.w, wire.UnroutableSubject(p.world), m, meta); err != nil {
		return err
	}
	if err := handles.Of(p.w).Mailbox.DeleteMsg(ctx, m.Sequence); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return fmt.Errorf("moved message %d aside but could not remove it: %w", m.Sequence, err)
	}
	p.log.Warn("purge: unroutable message moved to the world's dead letters",
		"world", p.world, "subject", m.Subject, "seq", m.Sequence, "reason", reason)
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
// message, which fencepostd returns once quiet (docs/design.md 3.11).
//
// Its filter is wire.MailboxSweepFilter: a consumer filtered on the
// mailboxes' own "fp.<world>.mb.*" is never given a post to the literal
// subject fp.<world>.mb.>, which the stream stores.
//
// A message it cannot move (the unroutable store is full, the server
// refused) is logged and tried again every retry interval (WithRetry,
// 10 s by default) until it moves: up to maxLeft such messages by their
// sequence, and past that by a SweepUnroutable at each interval.
func (p *Purger) FollowUnroutable(ctx context.Context) error {
	cons, err := handles.Of(p.w).Mailbox.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{wire.MailboxSweepFilter(p.world)},
		HeadersOnly:    true,
	})
	if err != nil {
		return fmt.Errorf("purge: follow the mailboxes of %q: %w", p.world, err)
	}
	found := make(chan leftMsg, 1024)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		tok, _ := wire.MailboxToken(p.world, m.Subject())
		_, why := wire.DecodeID(tok)
		if why == nil {
			return
		}
		meta, err := m.Metadata()
		if err != nil {
			return
		}
		select {
		case found <- leftMsg{meta.Sequence.Stream, why.Error()}:
		case <-ctx.Done():
		}
	})
	if err != nil {
		return fmt.Errorf("purge: follow the mailboxes of %q: %w", p.world, err)
	}
	defer cc.Stop()
	retry := time.NewTicker(p.retry)
	defer retry.Stop()
	l := &leftover{seqs: map[uint64]string{}}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-cc.Closed():
			return fmt.Errorf("purge: following the mailboxes of %q stopped", p.world)
		case b := <-found:
			if err := p.moveSeq(ctx, b.seq, b.reason); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				l.add(b)
				p.log.Warn("purge: cannot move an unroutable message aside; it stays where it is and is tried again",
					"world", p.world, "seq", b.seq, "retry_in", p.retry, "error", err)
			}
		case <-retry.C:
			p.retryLeft(ctx, l)
		}
	}
}

// leftMsg is an unroutable message found by the follower, by its
// sequence, and why it is unroutable.
type leftMsg struct {
	seq    uint64
	reason string
}

// leftover is what the follower could not move yet: the messages by
// sequence, or, past maxLeft of them, a sweep to run.
type leftover struct {
	seqs  map[uint64]string
	sweep bool
}

// maxLeft is how many unroutable messages the follower keeps to try again
// by their sequence; past that it sweeps.
const maxLeft = 10_000

func (l *leftover) add(m leftMsg) {
	if len(l.seqs) >= maxLeft {
		l.sweep = true
		return
	}
	l.seqs[m.seq] = m.reason
}

// retryLeft tries once more to move what the follower could not.
func (p *Purger) retryLeft(ctx context.Context, l *leftover) {
	if l.sweep {
		res, err := p.SweepUnroutable(ctx)
		if err == nil && res.Left == 0 {
			l.sweep = false
			clear(l.seqs) // moved by the sweep
		}
		return
	}
	var last error
	for seq, reason := range l.seqs {
		if err := p.moveSeq(ctx, seq, reason); err != nil {
			if ctx.Err() != nil {
				return
			}
			last = err
			continue
		}
		delete(l.seqs, seq)
	}
	if last != nil {
		p.log.Warn("purge: unroutable messages still cannot be moved aside; they stay where they are and are tried again",
			"world", p.world, "messages", len(l.seqs), "retry_in", p.retry, "error", last)
	}
}

// moveSeq moves the unroutable message at seq aside (moveAside), unless it
// is gone already (moved or removed).
func (p *Purger) moveSeq(ctx context.Context, seq uint64, reason string) error {
	// Read with the server's headers last (jsapi.RawFromDirect): a
	// producer's own Nats-Sequence on an unroutable post named the message
	// this removed (nats.go's GetMsg reads the first).
	got, err := jsapi.DirectGet(ctx, p.nc, wire.MailboxStream(p.world), jsapi.GetRequest{Seq: seq, Batch: 1})
	if err != nil {
		return err
	}
	if len(got.Msgs) == 0 || got.Msgs[0].Sequence != seq {
		return nil // moved or removed already
	}
	if err := p.moveAside(ctx, got.Msgs[0], reason); err != nil {
		return err
	}
	p.metrics.UnroutableMoved(p.world, 1)
	return nil
}
