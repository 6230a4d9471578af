package jsapi

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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
func Barrier(ctx context.Context, js jetstream.JetStream, stream, barrier, subject string, seq uint64) (BarrierResult, error) {
	res, _, err := Fenced(ctx, js, stream, nats.NewMsg(barrier), subject, seq)
	return res, err
}

// Fenced publishes m (a message on a subject of stream) so that the stream
// stores it only if subject's last message is at sequence seq, as Barrier
// does with its empty message: BarrierStored with the acknowledgement,
// BarrierMoved or BarrierBusy with nothing stored, or an error
// (ErrBarrierUnanswered: whether m was stored is not known). m's headers
// gain the expectation.
func Fenced(ctx context.Context, js jetstream.JetStream, stream string, m *nats.Msg, subject string, seq uint64) (BarrierResult, *jetstream.PubAck, error) {
	ctx, cancel := WithTimeout(ctx)
	defer cancel()
	ack, err := js.PublishMsg(ctx, m, jetstream.WithExpectLastSequenceForSubject(seq, subject))
	var apiErr *jetstream.APIError
	switch {
	case errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence:
		return BarrierMoved, nil, nil
	case errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant:
		return BarrierBusy, nil, nil
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
		return 0, nil, fmt.Errorf("%w: stream %s, %s at %d: %w", ErrBarrierUnanswered, stream, subject, seq, err)
	case err != nil:
		return 0, nil, fmt.Errorf("fenced write on stream %s: %w", stream, err)
	case ack.Stream != stream || ack.Sequence == 0:
		return 0, nil, fmt.Errorf("fenced write on stream %s: acknowledged by stream %q at sequence %d", stream, ack.Stream, ack.Sequence)
	}
	return BarrierStored, ack, nil
}
