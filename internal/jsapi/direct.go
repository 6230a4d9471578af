package jsapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// APIDirectGet is the direct get subject prefix (default API prefix),
// answered by any replica of a stream with allow_direct, outside the
// JetStream API queue.
const APIDirectGet = "$JS.API.DIRECT.GET."

// MaxMultiLast is how many subjects one multi-last direct get may name (the
// server answers at most 1,024 messages).
const MaxMultiLast = 1000

// Batch is the answer to a direct get: the messages in stream order, and
// how many more match after the last one (as the answering replica saw it).
type Batch struct {
	Msgs    []*jetstream.RawStreamMsg
	Pending uint64
}

// DirectGet sends one direct get that may be answered by many messages (a
// batch, or a multi-last) and an end-of-batch status. No message matching
// is an empty Batch, not an error. A context without a deadline gets
// Timeout: a request or answer lost to a server crash must end the read,
// not hang it. On a replicated stream any replica may answer, so the
// answer can lag the leader; a batch is always a prefix of the matching
// messages, never one out of order. An answer that lost messages on the
// way (a reconnect in the middle of it) is ErrIncomplete, never taken for
// whole; so is a drop of the connection while the answer is awaited,
// which may have lost all of it (the read ends at the drop, not at its
// timeout: nextDrop).
func DirectGet(ctx context.Context, nc *nats.Conn, stream string, r GetRequest) (Batch, error) {
	ctx, cancel := WithTimeout(ctx)
	defer cancel()
	what := r.NextFor
	if what == "" {
		what = stream
	}
	req, err := json.Marshal(r)
	if err != nil {
		return Batch{}, err
	}
	// The answer is at most one message per subject asked for and the
	// end-of-batch status: a channel that holds them all never drops one.
	// SubscribeSync would allocate nats.go's default 65,536-slot channel on
	// every read (512 KB: under the fan-in bench, a fifth of all CPU went
	// to allocating and collecting them).
	ch := make(chan *nats.Msg, max(r.Batch, len(r.MultiLast), 1)+2)
	inbox := nc.NewInbox()
	sub, err := nc.ChanSubscribe(inbox, ch)
	if err != nil {
		return Batch{}, fmt.Errorf("read %s: %w", what, err)
	}
	defer sub.Unsubscribe()
	// Taken before the request goes out: a drop after it may have lost
	// the answer, or the rest of it.
	dropped := nextDrop(nc)
	if err := nc.PublishRequest(APIDirectGet+stream, inbox, req); err != nil {
		return Batch{}, fmt.Errorf("read %s: %w", what, err)
	}
	var out Batch
	// last: the sequence of the answer's last message so far. The answer
	// is whole only if each message names the one before it in the same
	// answer (chained).
	var last uint64
	for {
		var m *nats.Msg
		select {
		case m = <-ch:
		case <-ctx.Done():
			return Batch{}, fmt.Errorf("read %s from %d: %w", what, r.Seq, ctx.Err())
		case <-dropped:
			// What came before the drop is read first: it may be the
			// whole answer.
			select {
			case m = <-ch:
			default:
				return Batch{}, fmt.Errorf("read %s from %d: the connection dropped while the answer was awaited (%d messages came): %w", what, r.Seq, len(out.Msgs), ErrIncomplete)
			}
		}
		// A status of the server's own, not a stored message: a stored
		// one always carries the server's Nats-Sequence, and its own
		// headers may include a "Status" a publisher sent.
		if len(m.Data) == 0 && m.Header.Get("Status") != "" && LastValue(m.Header, jetstream.SequenceHeader) == "" {
			switch m.Header.Get("Status") {
			case "204": // end of batch
				if err := chained(m.Header, last); err != nil {
					return Batch{}, fmt.Errorf("read %s from %d: the end of the answer %w", what, r.Seq, err)
				}
				out.Pending, _ = strconv.ParseUint(m.Header.Get("Nats-Num-Pending"), 10, 64)
				return out, nil
			case "404":
				if len(out.Msgs) > 0 {
					// Sent only instead of a first message.
					return Batch{}, fmt.Errorf("read %s from %d: %w (not found after %d messages)", what, r.Seq, ErrIncomplete, len(out.Msgs))
				}
				return out, nil
			case "503":
				return Batch{}, fmt.Errorf("read %s: no replica of stream %s answers: %w", what, stream, nats.ErrNoResponders)
			default:
				return Batch{}, fmt.Errorf("read %s: %s %s", what, m.Header.Get("Status"), m.Header.Get("Description"))
			}
		}
		sm, err := RawFromDirect(m)
		if err != nil {
			return Batch{}, fmt.Errorf("read %s: %w", what, err)
		}
		if err := chained(m.Header, last); err != nil {
			return Batch{}, fmt.Errorf("read %s from %d: message %d %w", what, r.Seq, sm.Sequence, err)
		}
		last = sm.Sequence
		out.Msgs = append(out.Msgs, sm)
	}
}

// ErrIncomplete: an answer of many messages (a batch, a multi-last) came
// without some of them. The server sends each message of an answer to
// the reply subject's subscribers at that moment: when the client
// reconnects in the middle of it (a cut connection), the messages sent
// before its subscription was made again are lost, and the rest and the
// end of batch come on the new connection. Taken as it came, the batch of
// a mailbox read from the cursor missed its first messages, and the drain
// committed over them (TestHolding_CutWhileReading; the likely cause of
// the 91 messages a CI run of the proxy fault scenario lost,
// docs/reliability.md section 6). A read that was waiting when its
// connection dropped ends with it too: the answer may be lost whole.
var ErrIncomplete = errors.New("jsapi: the answer lost messages on the way (a reconnect in the middle of it)")

// headerLastSequence: in an answer of many messages, the server names in
// each the sequence of the message it sent before it in the same answer
// (0 for the first), and in the end of batch the last one it sent.
const headerLastSequence = "Nats-Last-Sequence"

// chained checks that h, of a message or of the end of batch of an answer
// whose last message so far is last, names last as the one before it. A
// header without the name (a server that does not send it) proves
// nothing and passes. The server's value is the last (LastValue): a
// stored message may carry a header of that name its publisher set.
func chained(h nats.Header, last uint64) error {
	v := LastValue(h, headerLastSequence)
	if v == "" {
		return nil
	}
	if p, err := strconv.ParseUint(v, 10, 64); err != nil || p != last {
		return fmt.Errorf("follows message %s, not %d: %w", v, last, ErrIncomplete)
	}
	return nil
}

// RawFromDirect reads a message of a direct get's answer (its Nats-Sequence,
// Nats-Time-Stamp and Nats-Subject headers).
func RawFromDirect(m *nats.Msg) (*jetstream.RawStreamMsg, error) {
	// The server's headers come after the stored message's own, which a
	// publisher may have named the same (LastValue): the last is the
	// server's (TestRawFromDirect_PublisherHeaders).
	seq, err := strconv.ParseUint(LastValue(m.Header, jetstream.SequenceHeader), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("bad sequence header %q", LastValue(m.Header, jetstream.SequenceHeader))
	}
	ts, err := time.Parse(time.RFC3339Nano, LastValue(m.Header, jetstream.TimeStampHeaer))
	if err != nil {
		return nil, fmt.Errorf("bad timestamp header %q", LastValue(m.Header, jetstream.TimeStampHeaer))
	}
	return &jetstream.RawStreamMsg{Subject: LastValue(m.Header, jetstream.SubjectHeader), Sequence: seq, Header: m.Header, Data: m.Data, Time: ts}, nil
}

// APIStreamInfo is the stream info subject prefix (default API prefix).
// Its request may ask for every subject of the stream with its count
// (subjects_filter), which subject permissions cannot restrict: under
// fencepostd --auth a producer may not send it (docs/security.md).
const APIStreamInfo = "$JS.API.STREAM.INFO."

// DirectLastSubject is the subject of a direct get of the last message of
// subject in stream: the request names the subject in its own subject and
// carries no payload, so a permission to publish to it permits reading that
// one subject and nothing else of the stream (the server refuses a
// sequence, a batch or another filter in such a request).
func DirectLastSubject(stream, subject string) string {
	return APIDirectGet + stream + "." + subject
}

// DirectLast reads the last message of subject in stream with a direct get
// by subject (DirectLastSubject). It returns ErrNotFound when the stream
// holds none. A context without a deadline gets Timeout.
func DirectLast(ctx context.Context, nc *nats.Conn, stream, subject string) (*jetstream.RawStreamMsg, error) {
	ctx, cancel := WithTimeout(ctx)
	defer cancel()
	m, err := request(ctx, nc, DirectLastSubject(stream, subject), nil)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", subject, err)
	}
	// A status of the server's own carries no stored sequence (a stored
	// message may carry a "Status" its publisher sent: DirectGet).
	if len(m.Data) == 0 && m.Header.Get("Status") != "" && LastValue(m.Header, jetstream.SequenceHeader) == "" {
		switch m.Header.Get("Status") {
		case "404":
			return nil, ErrNotFound
		case "503":
			return nil, fmt.Errorf("read %s: no replica of stream %s answers: %w", subject, stream, nats.ErrNoResponders)
		default:
			return nil, fmt.Errorf("read %s: %s %s", subject, m.Header.Get("Status"), m.Header.Get("Description"))
		}
	}
	sm, err := RawFromDirect(m)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", subject, err)
	}
	return sm, nil
}
