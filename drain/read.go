package drain

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/jsapi"
)

// JetStream API subjects this package reads with (default API prefix).
const (
	apiDirectGet = "$JS.API.DIRECT.GET."
)

// maxMultiLast is how many subjects one multi-last direct get may name (the
// server answers at most 1,024 messages).
const maxMultiLast = 1000

// batchResult is one batch read: the messages in stream order, and how
// many more match after the last one (as the answering replica saw it).
type batchResult struct {
	msgs    []*jetstream.RawStreamMsg
	pending uint64
}

// readBatch reads up to n messages of subj from sequence from on with one
// batched direct get. Any replica may answer, so on a replicated stream the
// answer can lag the leader: it is always a prefix of the subject's
// messages from `from`, never a message out of order.
func readBatch(ctx context.Context, nc *nats.Conn, stream, subj string, from uint64, n int) (batchResult, error) {
	return directGet(ctx, nc, stream, subj, jsapi.GetRequest{Seq: from, NextFor: subj, Batch: n})
}

// readLast reads the last message of each of subjects (at most
// maxMultiLast) with one multi-last direct get; subjects without a message
// are absent from the answer.
func readLast(ctx context.Context, nc *nats.Conn, stream string, subjects []string) (batchResult, error) {
	return directGet(ctx, nc, stream, stream, jsapi.GetRequest{MultiLast: subjects})
}

// directGet sends one direct get that may be answered by many messages and
// an end-of-batch status. A context without a deadline gets jsapi.Timeout:
// a request or answer lost to a server crash must end the read (the drain
// then fails and is retried), not hang it.
func directGet(ctx context.Context, nc *nats.Conn, stream, subj string, r jsapi.GetRequest) (batchResult, error) {
	ctx, cancel := jsapi.WithTimeout(ctx)
	defer cancel()
	from := r.Seq
	req, err := json.Marshal(r)
	if err != nil {
		return batchResult{}, err
	}
	// The answer is at most one message per subject asked for (a batch,
	// or a multi-last) and the end-of-batch status: a channel that holds
	// them all never drops one. SubscribeSync would allocate nats.go's
	// default 65,536-slot channel on every read (512 KB: under the fan-in
	// bench, a fifth of all CPU went to allocating and collecting them).
	ch := make(chan *nats.Msg, max(r.Batch, len(r.MultiLast), 1)+2)
	inbox := nc.NewInbox()
	sub, err := nc.ChanSubscribe(inbox, ch)
	if err != nil {
		return batchResult{}, fmt.Errorf("drain: read %s: %w", subj, err)
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest(apiDirectGet+stream, inbox, req); err != nil {
		return batchResult{}, fmt.Errorf("drain: read %s: %w", subj, err)
	}
	var out batchResult
	for {
		var m *nats.Msg
		select {
		case m = <-ch:
		case <-ctx.Done():
			return batchResult{}, fmt.Errorf("drain: read %s from %d: %w", subj, from, ctx.Err())
		}
		if len(m.Data) == 0 && m.Header.Get("Status") != "" {
			switch m.Header.Get("Status") {
			case "204": // end of batch
				out.pending, _ = strconv.ParseUint(m.Header.Get("Nats-Num-Pending"), 10, 64)
				return out, nil
			case "404":
				return out, nil
			case "503":
				return batchResult{}, fmt.Errorf("drain: read %s: no replica of stream %s answers: %w", subj, stream, nats.ErrNoResponders)
			default:
				return batchResult{}, fmt.Errorf("drain: read %s: %s %s", subj, m.Header.Get("Status"), m.Header.Get("Description"))
			}
		}
		sm, err := rawFromDirect(m)
		if err != nil {
			return batchResult{}, fmt.Errorf("drain: read %s: %w", subj, err)
		}
		out.msgs = append(out.msgs, sm)
	}
}

func rawFromDirect(m *nats.Msg) (*jetstream.RawStreamMsg, error) {
	seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("bad sequence header %q", m.Header.Get(jetstream.SequenceHeader))
	}
	ts, err := time.Parse(time.RFC3339Nano, m.Header.Get(jetstream.TimeStampHeaer))
	if err != nil {
		return nil, fmt.Errorf("bad timestamp header %q", m.Header.Get(jetstream.TimeStampHeaer))
	}
	return &jetstream.RawStreamMsg{Subject: m.Header.Get(jetstream.SubjectHeader), Sequence: seq, Header: m.Header, Data: m.Data, Time: ts}, nil
}
