package jsapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Headers of a conditional publish (nats-server stream.go).
const (
	hdrExpectedLastSubjSeq     = "Nats-Expected-Last-Subject-Sequence"
	hdrExpectedLastSubjSeqSubj = "Nats-Expected-Last-Subject-Sequence-Subject"
)

// BarrierResult is what a barrier's stream answered.
type BarrierResult int

const (
	// BarrierStored: the barrier was stored, so subject's last sequence
	// was seq at the barrier's place in the stream.
	BarrierStored BarrierResult = iota
	// BarrierMoved: subject's last sequence is no longer seq (10071).
	BarrierMoved
	// BarrierBusy: a write conditional on subject is in flight at the
	// leader (10164, replicated streams): its outcome decides.
	BarrierBusy
)

// ErrBarrierUnanswered: the barrier got no answer in time. Whether it was
// stored is not known; it changes nothing of subject either way.
var ErrBarrierUnanswered = errors.New("jsapi: barrier unanswered")

// Barrier publishes an empty message on barrier (a subject of stream)
// that the stream stores only if subject's last message is at sequence
// seq (0: subject has no message). It is a read that only a leader with a
// quorum answers yes to: on a replicated stream the leader checks the
// expectation against its state, with every write in flight, before it
// proposes the message, and the message is stored, and acknowledged, only
// once a quorum has it in its log (docs/design.md, invariant 8). A
// context without a deadline gets Timeout.
func Barrier(ctx context.Context, nc *nats.Conn, stream, barrier, subject string, seq uint64) (BarrierResult, error) {
	ctx, cancel := WithTimeout(ctx)
	defer cancel()
	m := nats.NewMsg(barrier)
	m.Header.Set(hdrExpectedLastSubjSeq, strconv.FormatUint(seq, 10))
	m.Header.Set(hdrExpectedLastSubjSeqSubj, subject)
	resp, err := nc.RequestMsgWithContext(ctx, m)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) {
			return 0, fmt.Errorf("%w: stream %s, %s at %d: %w", ErrBarrierUnanswered, stream, subject, seq, err)
		}
		return 0, fmt.Errorf("barrier on stream %s: %w", stream, err)
	}
	var r struct {
		Stream string `json:"stream"`
		Seq    uint64 `json:"seq"`
		Error  *struct {
			Code        int    `json:"code"`
			ErrCode     uint16 `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return 0, fmt.Errorf("barrier on stream %s: bad response %q: %w", stream, resp.Data, err)
	}
	if r.Error != nil {
		switch jetstream.ErrorCode(r.Error.ErrCode) {
		case jetstream.JSErrCodeStreamWrongLastSequence:
			return BarrierMoved, nil
		case jetstream.JSErrCodeStreamWrongLastSequenceConstant:
			return BarrierBusy, nil
		}
		return 0, fmt.Errorf("barrier on stream %s: %w", stream, &jetstream.APIError{Code: r.Error.Code, ErrorCode: jetstream.ErrorCode(r.Error.ErrCode), Description: r.Error.Description})
	}
	if r.Stream != stream || r.Seq == 0 {
		return 0, fmt.Errorf("barrier on stream %s: acknowledged by stream %q at sequence %d", stream, r.Stream, r.Seq)
	}
	return BarrierStored, nil
}
