package jsapi

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// JetStream's atomic batch publish (server 2.12+; nats.go v1.55 has no API
// for it). A stream with allow_atomic stores every message of a batch or
// none: the messages carry the batch's id and their place in it, the last
// one also the commit header, and only the commit is answered. Each
// message's expected-last-subject-sequence check is made at the commit,
// against the stream as it was before the batch.
//
// Limits of nats-server v2.15.2 and v2.15.3 (server/stream.go,
// jetstream_batching.go; the server's jetstream limits max_batch_size,
// max_batch_inflight_*, max_batch_timeout change them):
//
//   - at most 1,000 messages in a batch (MaxAtomicBatch);
//   - at most 50 batches open at once per stream and 1,000 per server (a
//     batch is open from its first message to its commit); more is
//     refused with 10210, nothing stored;
//   - a batch whose commit does not arrive within 10 s is abandoned;
//   - a subject written earlier in the batch cannot carry an expected
//     check later in it, and a subject whose expected check is in flight
//     in another batch (replicated streams) is refused (10164);
//   - Nats-Expected-Last-Msg-Id is not allowed in a batch.
//
// On a file-backed single replica, the server writes the batch to a store
// of its own first and, after a crash in the middle of the commit, writes
// the rest of a batch whose commit it had accepted when it starts again;
// a batch whose commit never came is dropped. On a replicated stream the
// batch is one entry of the stream's log.
const (
	HeaderBatchID     = "Nats-Batch-Id"
	HeaderBatchSeq    = "Nats-Batch-Sequence"
	HeaderBatchCommit = "Nats-Batch-Commit"

	MaxAtomicBatch = 1000
)

// ErrAtomicDisabled: the stream does not allow atomic batches (10174).
var ErrAtomicDisabled = errors.New("jsapi: the stream does not allow atomic batch publish")

// batchMu keeps the batches of one process from interleaving on their way
// out: a batch is open in the server from its first message to its commit,
// and the server allows 50 open batches per stream.
var batchMu sync.Mutex

// stamp sets the batch headers on msgs and returns the batch id.
func stamp(msgs []*nats.Msg) error {
	if len(msgs) == 0 || len(msgs) > MaxAtomicBatch {
		return fmt.Errorf("jsapi: an atomic batch has 1 to %d messages, not %d", MaxAtomicBatch, len(msgs))
	}
	id := nats.NewInbox()[len(nats.InboxPrefix):]
	for i, m := range msgs {
		if m.Header == nil {
			m.Header = nats.Header{}
		}
		m.Header.Set(HeaderBatchID, id)
		m.Header.Set(HeaderBatchSeq, strconv.Itoa(i+1))
	}
	msgs[len(msgs)-1].Header.Set(HeaderBatchCommit, "1")
	return nil
}

// sendAllButCommit stamps msgs and publishes every message but the commit.
// The caller holds batchMu.
func sendAllButCommit(nc *nats.Conn, msgs []*nats.Msg) error {
	if err := stamp(msgs); err != nil {
		return err
	}
	for _, m := range msgs[:len(msgs)-1] {
		if err := nc.PublishMsg(m); err != nil {
			return fmt.Errorf("jsapi: batch not sent (nothing stored): %w", err)
		}
	}
	return nil
}

// PublishBatch publishes msgs as one atomic batch and waits for the
// answer to its commit: a PubAck (the sequence of the last message) when
// all were stored, the server's *jetstream.APIError when none was (for a
// refused expected check, 10071 or 10164, as a single publish), any other
// error when the outcome is unknown.
func PublishBatch(ctx context.Context, js jetstream.JetStream, msgs []*nats.Msg) (*jetstream.PubAck, error) {
	batchMu.Lock()
	if err := sendAllButCommit(js.Conn(), msgs); err != nil {
		batchMu.Unlock()
		return nil, err
	}
	// Publish the commit asynchronously under the lock (it goes out in
	// order), and wait outside it.
	f, err := js.PublishMsgAsync(msgs[len(msgs)-1])
	batchMu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("jsapi: batch commit not sent (nothing stored): %w", err)
	}
	return Await(ctx, f)
}

// Await waits for the answer to a batch's commit (PublishBatchAsync, or
// a part of a BatchQueue's batch), or for ctx's end: PublishBatch's
// outcomes.
func Await(ctx context.Context, f jetstream.PubAckFuture) (*jetstream.PubAck, error) {
	select {
	case a := <-f.Ok():
		return a, nil
	case err := <-f.Err():
		return nil, batchErr(err)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// PublishBatchAsync publishes msgs as one atomic batch without waiting for
// the answer to its commit (the future's, read as PublishBatch's).
func PublishBatchAsync(js jetstream.JetStream, msgs []*nats.Msg) (jetstream.PubAckFuture, error) {
	batchMu.Lock()
	defer batchMu.Unlock()
	if err := sendAllButCommit(js.Conn(), msgs); err != nil {
		return nil, err
	}
	f, err := js.PublishMsgAsync(msgs[len(msgs)-1])
	if err != nil {
		return nil, fmt.Errorf("jsapi: batch commit not sent (nothing stored): %w", err)
	}
	return f, nil
}

// batchErr names a disabled stream.
func batchErr(err error) error {
	if IsAtomicDisabled(err) {
		return fmt.Errorf("%w: %w", ErrAtomicDisabled, err)
	}
	return err
}

// IsAtomicDisabled says whether err is the server's refusal of a batch to
// a stream without allow_atomic.
func IsAtomicDisabled(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == 10174
}
