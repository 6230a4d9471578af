package drain

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/queue"
)

// Headers a dead letter carries besides the original's Fencepost-From and
// the sender's own headers (docs/wire.md "Mailboxes").
const (
	HeaderDeadSeq        = "Fencepost-Dead-Seq"        // the message's mailbox sequence
	HeaderDeadPosted     = "Fencepost-Dead-Posted"     // its posting time, RFC 3339
	HeaderDeadDeliveries = "Fencepost-Dead-Deliveries" // deliveries made
	HeaderDeadError      = "Fencepost-Dead-Error"      // the last handler error
	HeaderDeadNode       = "Fencepost-Dead-Node"       // the holder that gave up
	HeaderDeadEpoch      = "Fencepost-Dead-Epoch"      // and its epoch
)

// DeadLetter is a message that ran out of deliveries.
type DeadLetter struct {
	ID         string
	Seq        uint64 // its sequence in the mailbox stream as a dead letter
	MailboxSeq uint64 // its sequence when it was in the mailbox
	From       string
	Body       []byte
	Headers    nats.Header // the sender's own headers
	Posted     time.Time   // when it was first posted
	Died       time.Time   // when it became a dead letter
	Deliveries int
	Error      string
	Node       string
	Epoch      uint64
}

// deadLetter stores m in the id's dead letters. Its message id makes the
// store idempotent per mailbox message within the dedupe window, so a
// dead-lettering whose commit was then fenced does not leave a second copy
// when the next owner dead-letters the same message.
func (r *run) deadLetter(ctx context.Context, m *jetstream.RawStreamMsg, deliveries int, herr error) error {
	h := queue.UserHeaders(m.Header)
	if from := m.Header.Get(queue.HeaderFrom); from != "" {
		h.Set(queue.HeaderFrom, from)
	}
	h.Set(HeaderDeadSeq, strconv.FormatUint(m.Sequence, 10))
	h.Set(HeaderDeadPosted, m.Time.UTC().Format(time.RFC3339Nano))
	h.Set(HeaderDeadDeliveries, strconv.Itoa(deliveries))
	h.Set(HeaderDeadNode, r.a.node)
	h.Set(HeaderDeadEpoch, strconv.FormatUint(r.a.epoch, 10))
	h.Set(queue.HeaderMsgID, deadLetterMsgID(m.Sequence))
	room := int(r.d.cfg.MaxMsgSize) - len(m.Data) - queue.HeaderSize(h) - len(HeaderDeadError) - 4
	msg := clip(herr.Error())
	if len(msg) > room {
		msg = clip(msg[:max(room, 0)])
	}
	h.Set(HeaderDeadError, msg)
	_, err := r.d.js.PublishMsg(ctx, &nats.Msg{Subject: wire.DeadLetterSubject(r.d.world, r.a.id), Header: h, Data: m.Data})
	if err == nil {
		return nil
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return fmt.Errorf("%w: message %d of %q after %d deliveries (the dead letters may be full: list or purge them with dlq): %w", ErrDeadLetter, m.Sequence, r.a.id, deliveries, err)
	}
	return fmt.Errorf("%w: message %d of %q: %w", ErrDeadLetter, m.Sequence, r.a.id, err)
}

func deadLetterMsgID(seq uint64) string { return "fp-dl-" + strconv.FormatUint(seq, 10) }

// DeadLetters lists up to limit of id's dead letters, oldest first (limit
// <= 0: all).
func (d *Drainer) DeadLetters(ctx context.Context, id string, limit int) ([]DeadLetter, error) {
	if err := wire.ValidateID(id); err != nil {
		return nil, err
	}
	subj := wire.DeadLetterSubject(d.world, id)
	var out []DeadLetter
	for from := uint64(1); limit <= 0 || len(out) < limit; {
		n := d.batch
		if limit > 0 {
			n = min(n, limit-len(out))
		}
		b, err := readBatch(ctx, d.nc, wire.MailboxStream(d.world), subj, from, n)
		if err != nil {
			return nil, err
		}
		for _, m := range b.msgs {
			out = append(out, decodeDeadLetter(id, m))
			from = m.Sequence + 1
		}
		if len(b.msgs) < n || b.pending == 0 {
			break
		}
	}
	return out, nil
}

func decodeDeadLetter(id string, m *jetstream.RawStreamMsg) DeadLetter {
	h := m.Header
	dl := DeadLetter{
		ID: id, Seq: m.Sequence, From: h.Get(queue.HeaderFrom), Body: m.Data,
		Headers: queue.UserHeaders(h), Died: m.Time, Error: h.Get(HeaderDeadError), Node: h.Get(HeaderDeadNode),
	}
	// A header that does not parse reads as zero (unknown), never as the
	// clamped value strconv returns for a number out of range.
	dl.MailboxSeq = orZero(strconv.ParseUint(h.Get(HeaderDeadSeq), 10, 64))
	dl.Posted = orZero(time.Parse(time.RFC3339Nano, h.Get(HeaderDeadPosted)))
	dl.Deliveries = orZero(strconv.Atoi(h.Get(HeaderDeadDeliveries)))
	dl.Epoch = orZero(strconv.ParseUint(h.Get(HeaderDeadEpoch), 10, 64))
	return dl
}

// orZero is v, or T's zero value if err is set.
func orZero[T any](v T, err error) T {
	if err != nil {
		var zero T
		return zero
	}
	return v
}

// Repost moves id's dead letters back into its mailbox, oldest first, at
// the mailbox's end (with new sequences and a fresh delivery count). Each
// repost carries a message id derived from the dead letter, so a repost
// interrupted between the post and the removal of the dead letter and run
// again (inside the dedupe window) does not post twice. It returns how many
// moved; *queue.FullError when the mailbox filled up on the way.
func (d *Drainer) Repost(ctx context.Context, q *queue.Queue, id string) (int, error) {
	dls, err := d.DeadLetters(ctx, id, 0)
	if err != nil {
		return 0, err
	}
	moved := 0
	for _, dl := range dls {
		opts := []queue.SendOption{queue.WithMsgID("fp-re-" + strconv.FormatUint(dl.Seq, 10))}
		if dl.From != "" {
			opts = append(opts, queue.WithFrom(dl.From))
		}
		for k, vs := range dl.Headers {
			for _, v := range vs {
				opts = append(opts, queue.WithHeader(k, v))
			}
		}
		if _, err := q.Send(ctx, id, dl.Body, opts...); err != nil {
			return moved, err
		}
		if err := d.w.Mailbox.DeleteMsg(ctx, dl.Seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			return moved, fmt.Errorf("drain: reposted dead letter %d of %q but could not remove it: %w", dl.Seq, id, err)
		}
		moved++
	}
	return moved, nil
}

// PurgeDeadLetters drops all of id's dead letters and says how many there
// were.
func (d *Drainer) PurgeDeadLetters(ctx context.Context, id string) (uint64, error) {
	if err := wire.ValidateID(id); err != nil {
		return 0, err
	}
	subj := wire.DeadLetterSubject(d.world, id)
	info, err := d.w.Mailbox.Info(ctx, jetstream.WithSubjectFilter(subj))
	if err != nil {
		return 0, err
	}
	n := info.State.Subjects[subj]
	if err := d.w.Mailbox.Purge(ctx, jetstream.WithPurgeSubject(subj)); err != nil {
		return 0, fmt.Errorf("drain: purge dead letters of %q: %w", id, err)
	}
	return n, nil
}
