package mailbox

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/store"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/queue"
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
	// Subject is the subject an unroutable message was posted to (empty
	// for an id's dead letters).
	Subject string
	// BodySeq is the sequence of the body part of a dead letter stored in
	// two parts (0: one message).
	BodySeq uint64
}

// DeadLetters lists up to limit of id's dead letters, oldest first (limit
// <= 0: all).
func (a *Admin) DeadLetters(ctx context.Context, id string, limit int) ([]DeadLetter, error) {
	if err := wire.ValidateID(id); err != nil {
		return nil, err
	}
	return a.listDead(ctx, id, wire.DeadLetterSubject(a.world, id), limit)
}

// Unroutable lists up to limit of the world's unroutable messages (those
// fencepostd's purger moved aside: purge.Purger.FollowUnroutable and
// SweepUnroutable), oldest first (limit <= 0: all). Their ID is
// empty; Error says why no id could take them.
func (a *Admin) Unroutable(ctx context.Context, limit int) ([]DeadLetter, error) {
	return a.listDead(ctx, "", wire.UnroutableSubject(a.world), limit)
}

// listDead reads the dead letters stored on subj. A record stored in two
// parts gets its body from its body part; body parts themselves are not
// listed (each is part of a record, or a copy left by a crash, see
// store.WriteDead).
func (a *Admin) listDead(ctx context.Context, id, subj string, limit int) ([]DeadLetter, error) {
	var out []DeadLetter
	for from := uint64(1); limit <= 0 || len(out) < limit; {
		n := readBatch
		if limit > 0 {
			n = min(n, limit-len(out))
		}
		b, err := jsapi.DirectGet(ctx, a.nc, wire.MailboxStream(a.world), jsapi.GetRequest{Seq: from, NextFor: subj, Batch: n})
		if err != nil {
			return nil, err
		}
		for _, m := range b.Msgs {
			from = m.Sequence + 1
			if m.Header.Get(wire.HeaderDeadSeq) == "" {
				continue // a body part
			}
			dl := decodeDeadLetter(id, m)
			if dl.BodySeq != 0 {
				part, err := jsapi.LeaderGet(ctx, a.nc, wire.MailboxStream(a.world), jsapi.GetRequest{Seq: dl.BodySeq})
				if err != nil {
					return nil, fmt.Errorf("mailbox: dead letter %d of %q: its body part %d: %w", dl.Seq, id, dl.BodySeq, err)
				}
				dl.Body, dl.Headers, dl.From = part.Data, queue.UserHeaders(part.Header), queue.HeaderValue(part.Header, queue.HeaderFrom)
			}
			out = append(out, dl)
		}
		if len(b.Msgs) < n || b.Pending == 0 {
			break
		}
	}
	return out, nil
}

func decodeDeadLetter(id string, m *jetstream.RawStreamMsg) DeadLetter {
	h := m.Header
	dl := DeadLetter{
		ID: id, Seq: m.Sequence, From: queue.HeaderValue(h, queue.HeaderFrom), Body: m.Data,
		Headers: queue.UserHeaders(h), Died: m.Time, Error: h.Get(wire.HeaderDeadError), Node: h.Get(wire.HeaderDeadNode),
		Subject: h.Get(wire.HeaderDeadSubject),
	}
	// A header that does not parse reads as zero (unknown), never as the
	// clamped value strconv returns for a number out of range.
	dl.MailboxSeq = orZero(strconv.ParseUint(h.Get(wire.HeaderDeadSeq), 10, 64))
	dl.Posted = orZero(time.Parse(time.RFC3339Nano, h.Get(wire.HeaderDeadPosted)))
	dl.Deliveries = orZero(strconv.Atoi(h.Get(wire.HeaderDeadDeliveries)))
	dl.Epoch = orZero(strconv.ParseUint(h.Get(wire.HeaderDeadEpoch), 10, 64))
	dl.BodySeq = orZero(strconv.ParseUint(h.Get(wire.HeaderDeadBody), 10, 64))
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
// the mailbox's end (with new sequences and a fresh delivery count), and
// returns how many moved; *queue.FullError when the mailbox filled up on
// the way. It first makes sure that this connection may remove dead
// letters: a repost that could post but not remove would leave every
// message twice, so without that right it refuses and writes nothing.
//
// Each repost carries a message id derived from the dead letter
// ("fp-re-<seq>" in the id's scope) and HeaderRepostOf, so that a repost
// interrupted between the post and the removal and run again inside the
// dedupe window does not post twice. A duplicate answer is believed only
// if the stored message it names is that repost: a producer's message that
// happens to use the same key is never taken for it.
func (a *Admin) Repost(ctx context.Context, q *queue.Queue, id string) (int, error) {
	if err := wire.ValidateID(id); err != nil {
		return 0, err
	}
	dls, err := a.DeadLetters(ctx, id, 0)
	if err != nil || len(dls) == 0 {
		return 0, err
	}
	if err := a.mayDelete(ctx); err != nil {
		return 0, fmt.Errorf("mailbox: repost of %q refused, nothing reposted: %w", id, err)
	}
	moved := 0
	for _, dl := range dls {
		if err := a.repostOne(ctx, q, id, dl); err != nil {
			return moved, err
		}
		for _, seq := range []uint64{dl.Seq, dl.BodySeq} {
			if seq == 0 {
				continue
			}
			if err := handles.Of(a.w).Mailbox.DeleteMsg(ctx, seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
				return moved, fmt.Errorf("mailbox: reposted dead letter %d of %q but could not remove it: %w", dl.Seq, id, err)
			}
		}
		moved++
	}
	return moved, nil
}

// HeaderRepostOf marks a reposted message with the sequence of the dead
// letter it came from.
const HeaderRepostOf = "Fencepost-Repost-Of"

// repostOne posts one dead letter back into id's mailbox (Repost).
func (a *Admin) repostOne(ctx context.Context, q *queue.Queue, id string, dl DeadLetter) error {
	of := strconv.FormatUint(dl.Seq, 10)
	h := store.CloneHeader(dl.Headers)
	if dl.From != "" {
		h.Set(queue.HeaderFrom, dl.From)
	}
	marked := store.CloneHeader(h)
	marked.Set(queue.HeaderMsgID, wire.ScopedMsgID(id, "fp-re-"+of))
	marked.Set(HeaderRepostOf, of)
	subj := wire.MailboxSubject(a.world, id)
	limit := int(a.cfg.MaxMsgSize)
	if len(dl.Body)+queue.HeaderSize(marked) <= limit {
		ack, err := a.js.PublishMsg(ctx, &nats.Msg{Subject: subj, Header: marked, Data: dl.Body})
		if err != nil {
			return repostRefusal(q, id, err)
		}
		if !ack.Duplicate {
			return nil
		}
		first, err := jsapi.LeaderGet(ctx, a.nc, wire.MailboxStream(a.world), jsapi.GetRequest{Seq: ack.Sequence})
		// (Stored under the id's shard in a sharded world: storedSubject.)
		if err == nil && first.Subject == a.storedSubject(id) && first.Header.Get(HeaderRepostOf) == of {
			return nil // reposted by an earlier, interrupted run
		}
		// Not ours (a producer's message with this key), or gone (drained
		// since): post again without the key; at worst a duplicate.
	}
	if len(h) == 0 {
		h = nil
	}
	_, err := a.js.PublishMsg(ctx, &nats.Msg{Subject: subj, Header: h, Data: dl.Body})
	if err != nil {
		return repostRefusal(q, id, err)
	}
	return nil
}

func repostRefusal(q *queue.Queue, id string, err error) error {
	if full := q.AsFull(id, err); full != nil {
		return full
	}
	return fmt.Errorf("mailbox: repost to %q: %w", id, err)
}

// mayDelete asks the server to delete message 0 of the mailbox stream,
// which never exists: a connection allowed to delete gets the server's
// "no such message" answer; one without the right gets no answer (its
// request is dropped as a permissions violation) and an error here.
func (a *Admin) mayDelete(ctx context.Context) error {
	ctx, cancel := jsapi.WithTimeout(ctx)
	defer cancel()
	_, err := a.nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.DELETE."+wire.MailboxStream(a.world), []byte(`{"seq":0}`))
	if err != nil {
		return fmt.Errorf("this connection may not remove dead letters (an operator's right, docs/security.md): %w", err)
	}
	return nil
}

// PurgeDeadLetters drops all of id's dead letters and says how many there
// were.
func (a *Admin) PurgeDeadLetters(ctx context.Context, id string) (uint64, error) {
	if err := wire.ValidateID(id); err != nil {
		return 0, err
	}
	subj := wire.DeadLetterSubject(a.world, id)
	info, err := handles.Of(a.w).Mailbox.Info(ctx, jetstream.WithSubjectFilter(subj))
	if err != nil {
		return 0, err
	}
	n := info.State.Subjects[subj]
	if err := handles.Of(a.w).Mailbox.Purge(ctx, jetstream.WithPurgeSubject(subj)); err != nil {
		return 0, fmt.Errorf("mailbox: purge dead letters of %q: %w", id, err)
	}
	return n, nil
}
