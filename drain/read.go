package drain

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/jsapi"
)

// batchResult is one batch read: the messages in stream order, and how
// many more match after the last one (as the answering replica saw it).
type batchResult struct {
	msgs    []*jetstream.RawStreamMsg
	pending uint64
}

// readBatch reads up to n messages of subj from sequence from on with one
// batched direct get. Any replica may answer, so on a replicated stream the
// answer can lag the leader: it is always a prefix of the subject's
// messages from `from`, never a message out of order, and an answer that
// lost messages on the way fails (jsapi.ErrIncomplete).
func readBatch(ctx context.Context, nc *nats.Conn, stream, subj string, from uint64, n int) (batchResult, error) {
	return directGet(ctx, nc, stream, jsapi.GetRequest{Seq: from, NextFor: subj, Batch: n})
}

func directGet(ctx context.Context, nc *nats.Conn, stream string, r jsapi.GetRequest) (batchResult, error) {
	b, err := jsapi.DirectGet(ctx, nc, stream, r)
	if err != nil {
		return batchResult{}, fmt.Errorf("drain: %w", err)
	}
	return batchResult{msgs: b.Msgs, pending: b.Pending}, nil
}
