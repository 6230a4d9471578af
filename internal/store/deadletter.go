package store

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
	"github.com/fencepost/fencepost/world"
)

// WriteDead stores message m of w's mailbox stream on subj (an id's dead
// letters, or the world's unroutable messages) with the metadata headers
// meta, and wire.HeaderDeadSeq and wire.HeaderDeadPosted, which it sets.
// It keeps the body, Fencepost-From and the sender's own headers; no
// Nats- header.
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
// within the stream's max message size, or within the most header bytes
// the broker stores (world.MaxStoredHeaders), m is stored as it was
// posted (a body part, which fits since it was stored so before) on the
// subject's body-part subject (wire.PartSubject), and then a record on
// subj with the metadata and no body, naming the body part
// (HeaderDeadBody). So whatever a mailbox stored can be dead-lettered,
// and subj holds one message per dead letter. A body part carries
// wire.HeaderDeadPart when that fits, and a later try takes it up instead
// of storing another; one without it is removed when its record is
// refused. A body part whose record never came (refused, or a crash
// between the two) is a copy of a message that is still in its mailbox,
// so it is never the only copy, and no record names it.
func WriteDead(ctx context.Context, w *world.World, subj string, m *jetstream.RawStreamMsg, meta nats.Header) error {
	seq := strconv.FormatUint(m.Sequence, 10)
	meta.Set(wire.HeaderDeadSeq, seq)
	meta.Set(wire.HeaderDeadPosted, m.Time.UTC().Format(time.RFC3339Nano))
	body := queue.UserHeaders(m.Header)
	if from := queue.HeaderValue(m.Header, queue.HeaderFrom); from != "" {
		body.Set(queue.HeaderFrom, from)
	}
	for try := 1; ; try++ {
		var after uint64
		last, err := jsapi.LeaderGet(ctx, handles.Of(w).JS.Conn(), wire.MailboxStream(w.Name), jsapi.GetRequest{LastFor: subj})
		switch {
		case errors.Is(err, jsapi.ErrNotFound):
		case err != nil:
			return err
		case last.Header.Get(wire.HeaderDeadSeq) == seq:
			return nil
		default:
			after = last.Sequence
		}
		err = publishDead(ctx, w, subj, after, seq, m.Data, body, meta)
		if !WrongLastSequence(err) || try == 5 {
			return err
		}
	}
}

// publishDead writes one dead letter after the subject's message at
// sequence after: in one message if it fits, else a body part and a
// record (WriteDead).
func publishDead(ctx context.Context, w *world.World, subj string, after uint64, seq string, data []byte, body, meta nats.Header) error {
	js := handles.Of(w).JS
	limit := int(w.Config.MaxMsgSize)
	if mp := int(js.Conn().MaxPayload()); mp > 0 && mp < limit {
		limit = mp
	}
	fits := func(h nats.Header) bool {
		hs := queue.HeaderSize(h)
		return len(data)+hs <= limit && hs <= world.MaxStoredHeaders
	}
	whole := CloneHeader(body)
	maps.Copy(whole, meta)
	expect(whole, after)
	if fits(whole) {
		_, err := js.PublishMsg(ctx, &nats.Msg{Subject: subj, Header: whole, Data: data})
		return err
	}
	part, marked, err := storePart(ctx, w, subj, seq, data, body, fits)
	if err != nil {
		return err
	}
	rec := CloneHeader(meta)
	rec.Set(wire.HeaderDeadBody, strconv.FormatUint(part, 10))
	expect(rec, after)
	if _, err = js.PublishMsg(ctx, &nats.Msg{Subject: subj, Header: rec}); err != nil && !marked {
		// No record names the part, and no later try would know it for
		// this message's: remove it (a leftover at worst, if this fails
		// too). The caller reads again on a refused condition.
		if derr := handles.Of(w).Mailbox.DeleteMsg(ctx, part); derr != nil && !errors.Is(derr, jetstream.ErrMsgNotFound) {
			return fmt.Errorf("%w (and its body part %d stays: %v)", err, part, derr)
		}
	}
	return err
}

// storePart stores the body part of message seq on subj's body-part
// subject and returns its sequence, and whether it carries
// wire.HeaderDeadPart. A part marked so that a try before this one stored
// (the last on that subject) is taken up, not stored again: a drain that
// tries a dead-lettering at every pass while the record is refused (its
// store full) leaves one part, not one per try.
func storePart(ctx context.Context, w *world.World, subj, seq string, data []byte, body nats.Header, fits func(nats.Header) bool) (uint64, bool, error) {
	h := CloneHeader(body)
	h.Set(wire.HeaderDeadPart, seq)
	marked := fits(h)
	psubj := wire.PartSubject(subj)
	if marked {
		last, err := jsapi.LeaderGet(ctx, handles.Of(w).JS.Conn(), wire.MailboxStream(w.Name), jsapi.GetRequest{LastFor: psubj})
		switch {
		case errors.Is(err, jsapi.ErrNotFound):
		case err != nil:
			return 0, false, err
		case jsapi.LastValue(last.Header, wire.HeaderDeadPart) == seq:
			return last.Sequence, true, nil
		}
	} else if h = CloneHeader(body); len(h) == 0 {
		h = nil // no room for the mark: the message as it was stored
	}
	ack, err := handles.Of(w).JS.PublishMsg(ctx, &nats.Msg{Subject: psubj, Header: h, Data: data})
	if err != nil {
		return 0, false, err
	}
	return ack.Sequence, marked, nil
}

// expect makes a publish conditional on its subject's last sequence.
func expect(h nats.Header, last uint64) {
	h.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(last, 10))
}
