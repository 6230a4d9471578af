package drain

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/queue"
)

// Headers a dead letter carries besides the original's Fencepost-From and
// the sender's own headers (docs/wire.md "Dead letters").
const (
	HeaderDeadSeq        = "Fencepost-Dead-Seq"        // the message's mailbox sequence
	HeaderDeadPosted     = "Fencepost-Dead-Posted"     // its posting time, RFC 3339
	HeaderDeadDeliveries = "Fencepost-Dead-Deliveries" // deliveries made
	HeaderDeadError      = "Fencepost-Dead-Error"      // the last handler error
	HeaderDeadNode       = "Fencepost-Dead-Node"       // the holder that gave up
	HeaderDeadEpoch      = "Fencepost-Dead-Epoch"      // and its epoch
	HeaderDeadBody       = "Fencepost-Dead-Body"       // the body part's sequence, if stored in two parts
	HeaderDeadSubject    = "Fencepost-Dead-Subject"    // an unroutable message's subject
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

// deadLetter stores m in the id's dead letters (storeDead), or says why it
// could not: a WARN, a count in the metrics (dead_letter_failures_total)
// and ErrDeadLetter. The message then stays in the mailbox with its failure
// count committed, and the next drain retries the dead-lettering without
// calling the handler again.
func (r *run) deadLetter(ctx context.Context, m *jetstream.RawStreamMsg, deliveries int, herr string) error {
	meta := nats.Header{}
	meta.Set(HeaderDeadDeliveries, strconv.Itoa(deliveries))
	meta.Set(HeaderDeadNode, r.a.node)
	meta.Set(HeaderDeadEpoch, strconv.FormatUint(r.a.epoch, 10))
	meta.Set(HeaderDeadError, clip(herr))
	err := r.d.storeDead(ctx, wire.DeadLetterSubject(r.d.world, r.a.id), m, meta)
	if err == nil {
		return nil
	}
	if ctx.Err() == nil {
		r.d.metrics.DeadLetterFailed(r.d.world)
		r.d.log.Warn("drain: cannot dead-letter a message; it stays in the mailbox and the next drain tries again",
			"world", r.d.world, "id", r.a.id, "seq", m.Sequence, "deliveries", deliveries, "error", err)
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return fmt.Errorf("%w: message %d of %q after %d deliveries (the dead letters may be full: list or purge them with dlq): %w", ErrDeadLetter, m.Sequence, r.a.id, deliveries, err)
	}
	return fmt.Errorf("%w: message %d of %q: %w", ErrDeadLetter, m.Sequence, r.a.id, err)
}

// storeDead stores message m of the mailbox stream on subj (an id's dead
// letters, or the world's unroutable messages) with the metadata headers
// meta, and HeaderDeadSeq and HeaderDeadPosted, which it sets. It keeps the
// body, Fencepost-From and the sender's own headers; no Nats- header.
//
// Once per message: the subject's last message is read from the stream
// leader first, and if it is already m's (its HeaderDeadSeq), nothing is
// written (an earlier try, or an earlier holder whose commit was fenced,
// stored it). The write is conditional on that last message
// (Nats-Expected-Last-Subject-Sequence), so two writers cannot both store
// m; the loser reads again and finds m there. Nothing here depends on a
// Nats-Msg-Id, which any producer could have used first.
//
// Never too big: when m's body and headers leave no room for the metadata
// within the stream's max message size, m is stored as it was posted (a
// body part, which fits since it was stored so before) and then a record
// with the metadata and no body, naming the body part (HeaderDeadBody).
// A body part whose record never came (a crash between the two) is a copy
// of a message that is still in its mailbox, so it is never the only copy.
func (d *Drainer) storeDead(ctx context.Context, subj string, m *jetstream.RawStreamMsg, meta nats.Header) error {
	seq := strconv.FormatUint(m.Sequence, 10)
	meta.Set(HeaderDeadSeq, seq)
	meta.Set(HeaderDeadPosted, m.Time.UTC().Format(time.RFC3339Nano))
	body := queue.UserHeaders(m.Header)
	if from := queue.HeaderValue(m.Header, queue.HeaderFrom); from != "" {
		body.Set(queue.HeaderFrom, from)
	}
	for try := 1; ; try++ {
		var after uint64
		last, err := jsapi.LeaderGet(ctx, d.nc, wire.MailboxStream(d.world), jsapi.GetRequest{LastFor: subj})
		switch {
		case errors.Is(err, jsapi.ErrNotFound):
		case err != nil:
			return err
		case last.Header.Get(HeaderDeadSeq) == seq:
			return nil
		default:
			after = last.Sequence
		}
		err = d.publishDead(ctx, subj, after, m.Data, body, meta)
		if !isWrongLast(err) || try == 5 {
			return err
		}
	}
}

// publishDead writes one dead letter after the subject's message at
// sequence after: in one message if it fits, else a body part and a
// record (storeDead).
func (d *Drainer) publishDead(ctx context.Context, subj string, after uint64, data []byte, body, meta nats.Header) error {
	limit := int(d.cfg.MaxMsgSize)
	if mp := int(d.nc.MaxPayload()); mp > 0 && mp < limit {
		limit = mp
	}
	whole := cloneHeader(body)
	maps.Copy(whole, meta)
	expect(whole, after)
	if len(data)+queue.HeaderSize(whole) <= limit {
		_, err := d.js.PublishMsg(ctx, &nats.Msg{Subject: subj, Header: whole, Data: data})
		return err
	}
	part := cloneHeader(body)
	expect(part, after)
	if len(data)+queue.HeaderSize(part) > limit {
		// No room even for the condition: the record's condition, on this
		// part's sequence, still orders the pair.
		part.Del(jetstream.ExpectedLastSubjSeqHeader)
	}
	ack, err := d.js.PublishMsg(ctx, &nats.Msg{Subject: subj, Header: part, Data: data})
	if err != nil {
		return err
	}
	rec := cloneHeader(meta)
	rec.Set(HeaderDeadBody, strconv.FormatUint(ack.Sequence, 10))
	expect(rec, ack.Sequence)
	_, err = d.js.PublishMsg(ctx, &nats.Msg{Subject: subj, Header: rec})
	return err
}

// expect makes a publish conditional on its subject's last sequence.
func expect(h nats.Header, last uint64) {
	h.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(last, 10))
}

// isWrongLast says whether err is JetStream's refusal of a conditional
// publish whose subject moved on (10071, or 10164 on replicated streams).
func isWrongLast(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// DeadLetters lists up to limit of id's dead letters, oldest first (limit
// <= 0: all).
func (d *Drainer) DeadLetters(ctx context.Context, id string, limit int) ([]DeadLetter, error) {
	if err := wire.ValidateID(id); err != nil {
		return nil, err
	}
	return d.listDead(ctx, id, wire.DeadLetterSubject(d.world, id), limit)
}

// Unroutable lists up to limit of the world's unroutable messages (those
// SweepUnroutable moved), oldest first (limit <= 0: all). Their ID is
// empty; Error says why no id could take them.
func (d *Drainer) Unroutable(ctx context.Context, limit int) ([]DeadLetter, error) {
	return d.listDead(ctx, "", wire.UnroutableSubject(d.world), limit)
}

// listDead reads the dead letters stored on subj. A record stored in two
// parts gets its body from its body part; body parts themselves are not
// listed (each is part of a record, or a copy left by a crash, see
// storeDead).
func (d *Drainer) listDead(ctx context.Context, id, subj string, limit int) ([]DeadLetter, error) {
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
			from = m.Sequence + 1
			if m.Header.Get(HeaderDeadSeq) == "" {
				continue // a body part
			}
			dl := decodeDeadLetter(id, m)
			if dl.BodySeq != 0 {
				part, err := jsapi.LeaderGet(ctx, d.nc, wire.MailboxStream(d.world), jsapi.GetRequest{Seq: dl.BodySeq})
				if err != nil {
					return nil, fmt.Errorf("drain: dead letter %d of %q: its body part %d: %w", dl.Seq, id, dl.BodySeq, err)
				}
				dl.Body, dl.Headers, dl.From = part.Data, queue.UserHeaders(part.Header), queue.HeaderValue(part.Header, queue.HeaderFrom)
			}
			out = append(out, dl)
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
		ID: id, Seq: m.Sequence, From: queue.HeaderValue(h, queue.HeaderFrom), Body: m.Data,
		Headers: queue.UserHeaders(h), Died: m.Time, Error: h.Get(HeaderDeadError), Node: h.Get(HeaderDeadNode),
		Subject: h.Get(HeaderDeadSubject),
	}
	// A header that does not parse reads as zero (unknown), never as the
	// clamped value strconv returns for a number out of range.
	dl.MailboxSeq = orZero(strconv.ParseUint(h.Get(HeaderDeadSeq), 10, 64))
	dl.Posted = orZero(time.Parse(time.RFC3339Nano, h.Get(HeaderDeadPosted)))
	dl.Deliveries = orZero(strconv.Atoi(h.Get(HeaderDeadDeliveries)))
	dl.Epoch = orZero(strconv.ParseUint(h.Get(HeaderDeadEpoch), 10, 64))
	dl.BodySeq = orZero(strconv.ParseUint(h.Get(HeaderDeadBody), 10, 64))
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
func (d *Drainer) Repost(ctx context.Context, q *queue.Queue, id string) (int, error) {
	if err := wire.ValidateID(id); err != nil {
		return 0, err
	}
	dls, err := d.DeadLetters(ctx, id, 0)
	if err != nil || len(dls) == 0 {
		return 0, err
	}
	if err := d.mayDelete(ctx); err != nil {
		return 0, fmt.Errorf("drain: repost of %q refused, nothing reposted: %w", id, err)
	}
	moved := 0
	for _, dl := range dls {
		if err := d.repostOne(ctx, q, id, dl); err != nil {
			return moved, err
		}
		for _, seq := range []uint64{dl.Seq, dl.BodySeq} {
			if seq == 0 {
				continue
			}
			if err := handles.Of(d.w).Mailbox.DeleteMsg(ctx, seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
				return moved, fmt.Errorf("drain: reposted dead letter %d of %q but could not remove it: %w", dl.Seq, id, err)
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
func (d *Drainer) repostOne(ctx context.Context, q *queue.Queue, id string, dl DeadLetter) error {
	of := strconv.FormatUint(dl.Seq, 10)
	h := cloneHeader(dl.Headers)
	if dl.From != "" {
		h.Set(queue.HeaderFrom, dl.From)
	}
	marked := cloneHeader(h)
	marked.Set(queue.HeaderMsgID, wire.ScopedMsgID(id, "fp-re-"+of))
	marked.Set(HeaderRepostOf, of)
	subj := wire.MailboxSubject(d.world, id)
	limit := int(d.cfg.MaxMsgSize)
	if len(dl.Body)+queue.HeaderSize(marked) <= limit {
		ack, err := d.js.PublishMsg(ctx, &nats.Msg{Subject: subj, Header: marked, Data: dl.Body})
		if err != nil {
			return repostRefusal(q, id, err)
		}
		if !ack.Duplicate {
			return nil
		}
		first, err := jsapi.LeaderGet(ctx, d.nc, wire.MailboxStream(d.world), jsapi.GetRequest{Seq: ack.Sequence})
		if err == nil && first.Subject == subj && first.Header.Get(HeaderRepostOf) == of {
			return nil // reposted by an earlier, interrupted run
		}
		// Not ours (a producer's message with this key), or gone (drained
		// since): post again without the key; at worst a duplicate.
	}
	if len(h) == 0 {
		h = nil
	}
	_, err := d.js.PublishMsg(ctx, &nats.Msg{Subject: subj, Header: h, Data: dl.Body})
	if err != nil {
		return repostRefusal(q, id, err)
	}
	return nil
}

func repostRefusal(q *queue.Queue, id string, err error) error {
	if full := q.AsFull(id, err); full != nil {
		return full
	}
	return fmt.Errorf("drain: repost to %q: %w", id, err)
}

// mayDelete asks the server to delete message 0 of the mailbox stream,
// which never exists: a connection allowed to delete gets the server's
// "no such message" answer; one without the right gets no answer (its
// request is dropped as a permissions violation) and an error here.
func (d *Drainer) mayDelete(ctx context.Context) error {
	ctx, cancel := jsapi.WithTimeout(ctx)
	defer cancel()
	_, err := d.nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.DELETE."+wire.MailboxStream(d.world), []byte(`{"seq":0}`))
	if err != nil {
		return fmt.Errorf("this connection may not remove dead letters (an operator's right, docs/security.md): %w", err)
	}
	return nil
}

// cloneHeader is a deep copy of h.
func cloneHeader(h nats.Header) nats.Header {
	out := make(nats.Header, len(h))
	for k, vs := range h {
		out[k] = append([]string(nil), vs...)
	}
	return out
}

// PurgeDeadLetters drops all of id's dead letters and says how many there
// were.
func (d *Drainer) PurgeDeadLetters(ctx context.Context, id string) (uint64, error) {
	if err := wire.ValidateID(id); err != nil {
		return 0, err
	}
	subj := wire.DeadLetterSubject(d.world, id)
	info, err := handles.Of(d.w).Mailbox.Info(ctx, jetstream.WithSubjectFilter(subj))
	if err != nil {
		return 0, err
	}
	n := info.State.Subjects[subj]
	if err := handles.Of(d.w).Mailbox.Purge(ctx, jetstream.WithPurgeSubject(subj)); err != nil {
		return 0, fmt.Errorf("drain: purge dead letters of %q: %w", id, err)
	}
	return n, nil
}
