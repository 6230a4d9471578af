package shard

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/follow"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/wire"
)

// The shard's reader is internal/follow, the per-id worker's reader too:
// an ordered reading of the shard's stored mail with a consumer of its
// own, made again after the last message handed out whenever the reading
// breaks (a missed heartbeat, an error, a gap in the deliveries), each
// try bounded, so that a stream leader's death holds the shard's delivery
// for about the election, not for nats.go's 10 s tries.

// readerStopWait bounds the wait for a stopped reader (stop in read).
const readerStopWait = 2 * time.Second

// read starts the shard's reader from seq on: it hands out every message
// of the shard in stream order, without a gap, on the returned channel,
// which is closed when the reader ends (stopped, the connection closed,
// or a message without metadata: not skipped, for the book must see every
// message of the shard or its mark could pass one unseen; the holding
// ends, and the shard is claimed and read again). stop ends it and
// deletes its consumer.
func (h *holder) read(from uint64) (<-chan *jetstream.RawStreamMsg, func(), error) {
	out := make(chan *jetstream.RawStreamMsg, 256)
	ctx, cancel := context.WithCancel(h.ctx)
	opts := follow.Options{
		Filter:    []string{wire.ShardFilter(h.wk.w.Name, h.q)},
		From:      from,
		ReadAhead: h.wk.cfg.ReadAhead,
		Reset: func(err error) {
			h.log.Info("shard reader: reading again from its last message", "error", err)
		},
	}
	f, err := follow.Start(ctx, handles.Of(h.wk.w).Mailbox, opts, func(m jetstream.Msg, md *jetstream.MsgMetadata, err error) {
		if err != nil {
			h.log.Warn("shard reader: a message without metadata; the reader stops", "subject", m.Subject(), "error", err)
			cancel()
			return
		}
		raw := &jetstream.RawStreamMsg{Subject: m.Subject(), Sequence: md.Sequence.Stream, Header: m.Headers(), Data: m.Data(), Time: md.Timestamp}
		select {
		case out <- raw:
		case <-ctx.Done():
		}
	})
	if err != nil {
		cancel()
		return nil, nil, fmt.Errorf("shard %d: its reader: %w", h.q, err)
	}
	h.rd = f
	go func() {
		<-f.Done()
		close(out)
	}()
	// The reader may be blocked handing a message to a loop that no
	// longer reads (a graceful stop): cancel ends that too.
	stop := func() {
		cancel()
		select {
		case <-f.Done():
		case <-time.After(readerStopWait):
			h.log.Warn("the shard's reader did not stop; leaving it to end with its connection", "waited", readerStopWait)
		}
	}
	return out, stop, nil
}
