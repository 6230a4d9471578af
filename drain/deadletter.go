package drain

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/store"
	"github.com/fencepost/fencepost/internal/wire"
)

// deadLetter stores m in the id's dead letters (store.WriteDead), or says
// why it could not: a WARN, a count in the metrics (dead_letter_failures_total)
// and ErrDeadLetter. The message then stays in the mailbox with its failure
// count committed, and the next drain retries the dead-lettering without
// calling the handler again.
func (r *run) deadLetter(ctx context.Context, m *jetstream.RawStreamMsg, deliveries int, herr string) error {
	meta := nats.Header{}
	meta.Set(wire.HeaderDeadDeliveries, strconv.Itoa(deliveries))
	meta.Set(wire.HeaderDeadNode, r.a.node)
	meta.Set(wire.HeaderDeadEpoch, strconv.FormatUint(r.a.epoch, 10))
	meta.Set(wire.HeaderDeadError, store.Clip(herr))
	err := store.WriteDead(ctx, r.d.w, wire.DeadLetterSubject(r.d.world, r.a.id), m, meta)
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
