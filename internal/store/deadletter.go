package store

import (
	"context"
	"errors"
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
// within the stream's max message size, m is stored as it was posted (a
// body part, which fits since it was stored so before) and then a record
// with the metadata and no body, naming the body part (HeaderDeadBody).
// A body part whose record never came (a crash between the two) is a copy
// of a message that is still in its mailbox, so it is never the only copy.
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
		err = publishDead(ctx, w, subj, after, m.Data, body, meta)
		if !WrongLastSequence(err) || try == 5 {
			return err
		}
	}
}

// publishDead writes one dead letter after the subject's message at
// sequence after: in one message if it fits, else a body part and a
// record (WriteDead).
func publishDead(ctx context.Context, w *world.World, subj string, after uint64, data []byte, body, meta nats.Header) error {
	js := handles.Of(w).JS
	limit := int(w.Config.MaxMsgSize)
	if mp := int(js.Conn().MaxPayload()); mp > 0 && mp < limit {
		limit = mp
	}
	whole := CloneHeader(body)
	maps.Copy(whole, meta)
	expect(whole, after)
	if len(data)+queue.HeaderSize(whole) <= limit {
		_, err := js.PublishMsg(ctx, &nats.Msg{Subject: subj, Header: whole, Data: data})
		return err
	}
	part := CloneHeader(body)
	expect(part, after)
	if len(data)+queue.HeaderSize(part) > limit {
		// No room even for the condition: the record's condition, on this
		// part's sequence, still orders the pair.
		part.Del(jetstream.ExpectedLastSubjSeqHeader)
	}
	ack, err := js.PublishMsg(ctx, &nats.Msg{Subject: subj, Header: part, Data: data})
	if err != nil {
		return err
	}
	rec := CloneHeader(meta)
	rec.Set(wire.HeaderDeadBody, strconv.FormatUint(ack.Sequence, 10))
	expect(rec, ack.Sequence)
	_, err = js.PublishMsg(ctx, &nats.Msg{Subject: subj, Header: rec})
	return err
}

// expect makes a publish conditional on its subject's last sequence.
func expect(h nats.Header, last uint64) {
	h.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(last, 10))
}
