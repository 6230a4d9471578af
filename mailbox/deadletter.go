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
	"github.com/fencepost/fencepost/world"
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
// (wire.RepostMsgID: outside every mailbox's key scope, and naming the
// dead letter's stored time, which no producer can read), so that a
// repost interrupted between the post and the removal and run again
// inside the dedupe window does not post twice. Nothing a producer can
// write is trusted: no producer can send that message id first, so a
// duplicate answer is this repost's earlier post (unless the message it
// names is on another subject, when it posts again without the id: at
// worst a duplicate, never a loss). HeaderRepostOf marks the repost for
// readers of the stream; it is never read back.
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
// letter it came from. It is information for readers of the stream:
// Repost never trusts it (a producer may send it too).
const HeaderRepostOf = "Fencepost-Repost-Of"

// repostOne posts one dead letter back into id's mailbox (Repost).
func (a *Admin) repostOne(ctx context.Context, q *queue.Queue, id string, dl DeadLetter) error {
	of := strconv.FormatUint(dl.Seq, 10)
	h := store.CloneHeader(dl.Headers)
	if dl.From != "" {
		h.Set(queue.HeaderFrom, dl.From)
	}
	marked := store.CloneHeader(h)
	marked.Set(queue.HeaderMsgID, wire.RepostMsgID(id, dl.Seq, dl.Died.UnixNano()))
	marked.Set(HeaderRepostOf, of)
	subj := wire.MailboxSubject(a.world, id)
	limit := int(a.cfg.MaxMsgSize)
	if hs := queue.HeaderSize(marked); len(dl.Body)+hs <= limit && hs <= world.MaxStoredHeaders {
		ack, err := a.js.PublishMsg(ctx, &nats.Msg{Subject: subj, Header: marked, Data: dl.Body})
		if err != nil {
			return repostRefusal(q, id, err)
		}
		if !ack.Duplicate {
			return nil
		}
		// An earlier, interrupted run posted it: nobody else knows the
		// id. Its post may have been delivered and purged since.
		first, err := jsapi.LeaderGet(ctx, a.nc, wire.MailboxStream(a.world), jsapi.GetRequest{Seq: ack.Sequence})
		// (Stored under the id's shard in a sharded world: storedSubject.)
		if errors.Is(err, jsapi.ErrNotFound) || err == nil && first.Subject == a.storedSubject(id) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("mailbox: repost of dead letter %d of %q: read the message its key names: %w", dl.Seq, id, err)
		}
		// On another subject: not this repost's. Post again without the
		// key; at worst a duplicate.
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

// PurgeDeadLetters drops all of id's dead letters, with the body parts of
// those stored in two parts, and says how many dead letters there were.
func (a *Admin) PurgeDeadLetters(ctx context.Context, id string) (uint64, error) {
	if err := wire.ValidateID(id); err != nil {
		return 0, err
	}
	n, err := a.purgeDead(ctx, wire.DeadLetterSubject(a.world, id))
	if err != nil {
		return n, fmt.Errorf("mailbox: purge dead letters of %q: %w", id, err)
	}
	return n, nil
}

// PurgeUnroutable drops all of the world's unroutable messages that were
// moved aside (Unroutable lists them), and says how many there were. The
// ones still waiting on their subject are moved there by fencepostd
// after this, and stay until purged again.
func (a *Admin) PurgeUnroutable(ctx context.Context) (uint64, error) {
	n, err := a.purgeDead(ctx, wire.UnroutableSubject(a.world))
	if err != nil {
		return n, fmt.Errorf("mailbox: purge the unroutable messages of world %q: %w", a.world, err)
	}
	return n, nil
}

// purgeDead purges the dead letters on subj, the records first, then
// their body parts (a part without its record is a leftover), and returns
// how many records there were (legacy body parts on subj, from before
// wire.PartSubject, included).
func (a *Admin) purgeDead(ctx context.Context, subj string) (uint64, error) {
	mb := handles.Of(a.w).Mailbox
	info, err := mb.Info(ctx, jetstream.WithSubjectFilter(subj))
	if err != nil {
		return 0, err
	}
	n := info.State.Subjects[subj]
	for _, s := range []string{subj, wire.PartSubject(subj)} {
		if err := mb.Purge(ctx, jetstream.WithPurgeSubject(s)); err != nil {
			return n, err
		}
	}
	return n, nil
}

// Skip moves message seq of id's mailbox to id's dead letters at once,
// whatever its deliveries, and says so in its dead letter's error
// ("skipped by an operator"): the way to unblock an id whose next
// message cannot be delivered or dead-lettered by its drains (stat says
// undeliverable, and a WARN why), or that an operator wants out of the
// way. The message is dead-lettered like any (store.WriteDead, at most
// once, in two parts if it must be) and then removed from the mailbox;
// dlq repost brings it back. It is an operator's command: like Repost it
// first checks that this connection may remove messages, and without
// that right refuses and writes nothing.
//
// It refuses (ErrNotWaiting) a message that is not in id's mailbox or is
// committed already (at or below the cursor), and any skip on a sharded
// world (ErrInvalidOption). A holder that is delivering
// the message as it is skipped may still deliver it once more, and
// commits past it as usual: the dead letter then holds a copy of a
// message that was also delivered.
func (a *Admin) Skip(ctx context.Context, id string, seq uint64) error {
	if err := wire.ValidateID(id); err != nil {
		return err
	}
	if seq == 0 {
		return fmt.Errorf("%w: skip of %q: give the sequence of the message to skip (stat %s shows the next one's)", ErrInvalidOption, id, id)
	}
	if a.cfg.Shards > 0 {
		// A shard's holder keeps its ids' progress in the shard's cursor;
		// a message removed under it is not argued for yet.
		return fmt.Errorf("%w: skip of %q: world %q is sharded, where dlq skip is not available yet", ErrInvalidOption, id, a.world)
	}
	if err := a.mayDelete(ctx); err != nil {
		return fmt.Errorf("mailbox: skip of %q refused, nothing written: %w", id, err)
	}
	m, err := jsapi.LeaderGet(ctx, a.nc, wire.MailboxStream(a.world), jsapi.GetRequest{Seq: seq})
	if errors.Is(err, jsapi.ErrNotFound) {
		return fmt.Errorf("%w: message %d is not stored (delivered and removed, or never posted)", ErrNotWaiting, seq)
	}
	if err != nil {
		return fmt.Errorf("mailbox: skip: read message %d: %w", seq, err)
	}
	if m.Subject != a.storedSubject(id) {
		return fmt.Errorf("%w: message %d is not in the mailbox of %q", ErrNotWaiting, seq, id)
	}
	c, err := a.idCursor(ctx, id)
	if err != nil {
		return err
	}
	if seq <= c.Seq {
		return fmt.Errorf("%w: message %d of %q is committed (cursor %d): nothing to skip", ErrNotWaiting, seq, id, c.Seq)
	}
	why := "skipped by an operator (dlq skip)"
	if f := c.FailuresOf(seq); f > 0 {
		why += fmt.Sprintf(" after %d failed deliveries; last error: %s", f, c.Error)
	}
	meta := nats.Header{}
	meta.Set(wire.HeaderDeadDeliveries, strconv.Itoa(c.FailuresOf(seq)))
	meta.Set(wire.HeaderDeadError, store.Clip(why))
	if err := store.WriteDead(ctx, a.w, wire.DeadLetterSubject(a.world, id), m, meta); err != nil {
		return fmt.Errorf("mailbox: skip message %d of %q: its dead letter could not be stored, the message stays (list or purge the dead letters with dlq): %w", seq, id, err)
	}
	if err := handles.Of(a.w).Mailbox.DeleteMsg(ctx, seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return fmt.Errorf("mailbox: dead-lettered message %d of %q but could not remove it from the mailbox: %w", seq, id, err)
	}
	a.log.Info("mailbox: message skipped to the dead letters by an operator", "world", a.world, "id", id, "seq", seq)
	return nil
}
