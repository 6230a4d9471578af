// Package jsapi holds the JetStream reads that fencepost makes below the
// nats.go API: a message get answered by the stream leader, for the reads a
// decision rests on.
package jsapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// APIMsgGet is the (non-direct) message get subject prefix (default API
// prefix), answered by the stream leader.
const APIMsgGet = "$JS.API.STREAM.MSG.GET."

// Timeout bounds a read whose context has no deadline, as nats.go's
// jetstream package bounds its API calls: an answer lost to a server crash
// or a cut connection then ends the read with an error instead of leaving
// it waiting for ever.
const Timeout = 5 * time.Second

// WithTimeout returns ctx, bounded by Timeout when it has no deadline.
func WithTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, Timeout)
}

// ErrNotFound: the stream has no message that matches.
var ErrNotFound = errors.New("jsapi: no message")

// LastValue is the last value of header key in h, or "". A message the
// server republishes (a stream's RePublish) carries the stored message's
// headers first and the server's after them: a publisher that set a header
// of the same name (Nats-Sequence, say) comes first, the server's value
// last.
func LastValue(h nats.Header, key string) string {
	vs := h.Values(key)
	if len(vs) == 0 {
		return ""
	}
	return vs[len(vs)-1]
}

// The header of a KV entry that is a marker, not a value, and its values:
// a delete or a purge (JetStream's KV layout).
const (
	HeaderKVOperation = "KV-Operation"
	KVOpDelete        = "DEL"
	KVOpPurge         = "PURGE"
)

// GetRequest is JetStream's message get request.
type GetRequest struct {
	Seq       uint64   `json:"seq,omitempty"`
	LastFor   string   `json:"last_by_subj,omitempty"`
	NextFor   string   `json:"next_by_subj,omitempty"`
	Batch     int      `json:"batch,omitempty"`
	MultiLast []string `json:"multi_last,omitempty"`
	// MaxBytes bounds the bytes of an answer of many messages (0: the
	// server's max_pending, 64 MB by default). The server stops after
	// the message that reaches it; the end of batch then counts what it
	// did not send (Batch.Pending).
	MaxBytes int `json:"max_bytes,omitempty"`
}

type getResponse struct {
	Error *struct {
		Code        int    `json:"code"`
		ErrCode     uint16 `json:"err_code"`
		Description string `json:"description"`
	} `json:"error"`
	Message *struct {
		Subject string    `json:"subject"`
		Seq     uint64    `json:"seq"`
		Header  []byte    `json:"hdrs"`
		Data    []byte    `json:"data"`
		Time    time.Time `json:"time"`
	} `json:"message"`
}

// LeaderGet reads one message through the stream leader. Unlike a direct
// get (which any replica may answer, slightly stale on R3), the leader
// answers from the state every conditional write is checked against, so a
// decision and its refusal rest on the latest state. It returns ErrNotFound
// when no message matches. A context without a deadline gets Timeout.
//
// A request the leader does not answer within leaderTry is sent again, and
// one answered "unavailable" (503: the stream has no leader yet) again
// after leaderPause, until ctx ends: a read asked twice is still one
// read. A request sent to a leader that had just died is never answered,
// and waiting out the whole deadline for it held a worker's delivery for 5
// s after every bucket leader's death (bench --cluster 3 --kill-leaders);
// asked again, it is answered once the new leader is elected.
func LeaderGet(ctx context.Context, nc *nats.Conn, stream string, req GetRequest) (*jetstream.RawStreamMsg, error) {
	ctx, cancel := WithTimeout(ctx)
	defer cancel()
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	for {
		m, err := leaderGetOnce(ctx, nc, stream, body)
		var api *jetstream.APIError
		if !errors.As(err, &api) || api.Code != 503 {
			return m, err
		}
		select {
		case <-ctx.Done():
			return m, err
		case <-time.After(leaderPause):
		}
	}
}

// leaderTry bounds one request of LeaderGet; leaderPause is its wait
// before it asks again after an "unavailable".
const (
	leaderTry   = time.Second
	leaderPause = 100 * time.Millisecond
)

// leaderGetOnce is one read of LeaderGet: its request sent until answered
// (each try bounded by leaderTry), or ctx ends.
func leaderGetOnce(ctx context.Context, nc *nats.Conn, stream string, body []byte) (*jetstream.RawStreamMsg, error) {
	var resp *nats.Msg
	for {
		tctx, cancel := context.WithTimeout(ctx, leaderTry)
		m, err := request(tctx, nc, APIMsgGet+stream, body)
		cancel()
		if err == nil {
			resp = m
			break
		}
		if ctx.Err() != nil || !(errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)) {
			return nil, fmt.Errorf("read stream %s: %w", stream, err)
		}
	}
	var r getResponse
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return nil, fmt.Errorf("read stream %s: bad response: %w", stream, err)
	}
	if r.Error != nil {
		if r.Error.ErrCode == uint16(jetstream.JSErrCodeMessageNotFound) {
			return nil, ErrNotFound
		}
		// Keep the server's error, so that callers match its code.
		return nil, fmt.Errorf("read stream %s: %w", stream, &jetstream.APIError{Code: r.Error.Code, ErrorCode: jetstream.ErrorCode(r.Error.ErrCode), Description: r.Error.Description})
	}
	if r.Message == nil {
		return nil, ErrNotFound
	}
	sm := &jetstream.RawStreamMsg{Subject: r.Message.Subject, Sequence: r.Message.Seq, Data: r.Message.Data, Time: r.Message.Time}
	if len(r.Message.Header) > 0 {
		var err error
		if sm.Header, err = nats.DecodeHeadersMsg(r.Message.Header); err != nil {
			return nil, fmt.Errorf("read stream %s: bad headers: %w", stream, err)
		}
	}
	return sm, nil
}

// IsMarker reports whether a KV entry's headers make it a delete, purge or
// TTL marker rather than a value.
func IsMarker(h nats.Header) bool {
	if len(h) == 0 {
		return false
	}
	switch h.Get(HeaderKVOperation) {
	case KVOpDelete, KVOpPurge:
		return true
	}
	return h.Get(jetstream.MarkerReasonHeader) != ""
}
