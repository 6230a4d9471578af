package shard

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/wire"
)

// The shard's reader: an ordered reading of the shard's stored mail. Its
// consumer is an ephemeral one of the reader's own, with no acks, and it
// is made again, starting after the last message handed out, whenever the
// reading breaks: a missed heartbeat (the stream's leader died, or the
// consumer is gone), an error, or a gap in the consumer's delivery
// sequence. That is what nats.go's ordered consumer does, but nats.go
// makes the consumer again with a request of 10 s and waits from 1 s to 10
// s between tries: a request sent while the stream had no leader held the
// shard's delivery for 10 s (bench --cluster 3 --kill-leaders). Here each
// try is bounded by readerCreateWait and the next follows readerRetry
// later.
const (
	// The reader's pull requests: each lasts readerExpiry, and the server
	// sends a heartbeat every readerHeartbeat while it has nothing to
	// send; two missed ones make the consumer again.
	readerExpiry    = 5 * time.Second
	readerHeartbeat = 500 * time.Millisecond
	// readerCreateWait bounds one try at making the consumer, and
	// readerRetry is the pause after a failed one.
	readerCreateWait = 2 * time.Second
	readerRetry      = 250 * time.Millisecond
	// readerStopWait bounds the wait for a stopped reader (stop in read).
	readerStopWait = 2 * time.Second
	// readerInactive: how long the server keeps a reader's consumer
	// that nobody pulls from.
	readerInactive = 10 * time.Second
)

// read starts the shard's reader from seq on: it hands out every message
// of the shard in stream order, without a gap, on the returned channel,
// which is closed when the reader fails for good (a message without
// metadata, the connection closed). stop ends it and deletes its
// consumer.
func (h *holder) read(from uint64) (<-chan *jetstream.RawStreamMsg, func(), error) {
	r := &reader{h: h, next: max(from, 1)}
	h.rd = r
	ctx, cancel := jsapi.WithTimeout(h.ctx)
	err := r.start(ctx)
	cancel()
	if err != nil {
		return nil, nil, fmt.Errorf("shard %d: its reader: %w", h.q, err)
	}
	out := make(chan *jetstream.RawStreamMsg, 256)
	rctx, rcancel := context.WithCancel(h.ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(out)
		r.run(rctx, out)
	})
	// The reader may be blocked handing a message to a loop that no
	// longer reads (a graceful stop): end it before waiting for it.
	stop := func() {
		rcancel()
		r.stopConsumer()
		ended := make(chan struct{})
		go func() { wg.Wait(); close(ended) }()
		select {
		case <-ended:
		case <-time.After(readerStopWait):
			h.log.Warn("the shard's reader did not stop; leaving it to end with its connection", "waited", readerStopWait)
		}
	}
	return out, stop, nil
}

// reader is one holding's reading of its shard.
type reader struct {
	h    *holder
	next uint64 // the stream sequence to hand out from

	mu   sync.Mutex // guards it and name (stop runs beside run)
	it   jetstream.MessagesContext
	name string
	dseq uint64 // the last delivery sequence of the consumer (run only)
	// pending: the messages of the shard stored after the last one
	// handed out, as the server last said (a drain by hand ends at 0).
	pending atomic.Uint64
}

// start makes a consumer of the shard's mail from r.next on, and its
// iterator, trying again until ctx ends (each try bounded by
// readerCreateWait). A closed connection ends it at once.
func (r *reader) start(ctx context.Context) error {
	hd := handles.Of(r.h.wk.w)
	for try := 0; ; try++ {
		name := "fpr_" + strings.TrimPrefix(nats.NewInbox(), nats.InboxPrefix)
		cfg := jetstream.ConsumerConfig{
			Name:          name,
			FilterSubject: wire.ShardFilter(r.h.wk.w.Name, r.h.q),
			DeliverPolicy: jetstream.DeliverByStartSequencePolicy,
			OptStartSeq:   r.next,
			AckPolicy:     jetstream.AckNonePolicy,
			Replicas:      1,
			MemoryStorage: true,
			// A consumer whose delete (stop) was lost, or whose create
			// was answered too late, leaves the server soon.
			InactiveThreshold: readerInactive,
		}
		cctx, cancel := context.WithTimeout(ctx, readerCreateWait)
		cons, err := hd.Mailbox.CreateConsumer(cctx, cfg)
		cancel()
		var it jetstream.MessagesContext
		if err == nil {
			it, err = cons.Messages(jetstream.PullMaxMessages(r.h.wk.cfg.ReadAhead), jetstream.PullExpiry(readerExpiry),
				jetstream.PullHeartbeat(readerHeartbeat), jetstream.WithMessagesErrOnMissingHeartbeat(true))
			if err != nil {
				r.deleteConsumer(name)
			}
		}
		if err == nil {
			r.mu.Lock()
			r.it, r.name, r.dseq = it, name, 0
			r.mu.Unlock()
			r.pending.Store(cons.CachedInfo().NumPending)
			return nil
		}
		if errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, jetstream.ErrStreamNotFound) {
			return err
		}
		if try == 0 {
			r.h.log.Warn("shard reader: making its consumer failed; trying again", "from", r.next, "error", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last try: %w)", context.Cause(ctx), err)
		case <-time.After(readerRetry):
		}
	}
}

// run hands out the shard's messages until ctx ends or the reading fails
// for good, making the consumer again whenever the reading breaks.
func (r *reader) run(ctx context.Context, out chan<- *jetstream.RawStreamMsg) {
	for {
		err := r.pump(ctx, out)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errReaderFatal) {
			return
		}
		r.stopConsumer()
		r.h.log.Info("shard reader: reading again from its last message", "from", r.next, "error", err)
		if err := r.start(ctx); err != nil {
			if ctx.Err() == nil {
				r.h.log.Warn("shard reader stopped", "error", err)
			}
			return
		}
		if ctx.Err() != nil {
			// stop came while the consumer was being made: it may
			// have stopped the one before.
			r.stopConsumer()
			return
		}
	}
}

// errReaderFatal: the reading cannot go on (the reader stops, and the
// holding ends).
var errReaderFatal = errors.New("shard reader: cannot go on")

// pump hands out the current consumer's messages until its reading breaks.
func (r *reader) pump(ctx context.Context, out chan<- *jetstream.RawStreamMsg) error {
	r.mu.Lock()
	it, name := r.it, r.name
	r.mu.Unlock()
	if it == nil {
		// stop came first (it ends ctx before it stops the consumer): a
		// holding that ended as soon as it began.
		return fmt.Errorf("%w: stopped", errReaderFatal)
	}
	for {
		m, err := it.Next()
		if err != nil {
			if errors.Is(err, nats.ErrConnectionClosed) {
				return fmt.Errorf("%w: %w", errReaderFatal, err)
			}
			return err
		}
		md, err := m.Metadata()
		if err != nil {
			// Not skipped: the book must see every message of the
			// shard, or its mark could pass one unseen. The holding
			// ends, and the shard is claimed and read again.
			r.h.log.Warn("shard reader: a message without metadata; the reader stops", "subject", m.Subject(), "error", err)
			return fmt.Errorf("%w: %w", errReaderFatal, err)
		}
		if md.Consumer != name {
			continue // an earlier consumer's, late
		}
		if md.Sequence.Consumer != r.dseq+1 || md.Sequence.Stream < r.next {
			// A gap (a delivery lost on the way) or a message handed
			// out already: read again from the last one handed out.
			return fmt.Errorf("shard reader: delivery %d after %d (stream %d, next %d)", md.Sequence.Consumer, r.dseq, md.Sequence.Stream, r.next)
		}
		r.dseq = md.Sequence.Consumer
		raw := &jetstream.RawStreamMsg{Subject: m.Subject(), Sequence: md.Sequence.Stream, Header: m.Headers(), Data: m.Data(), Time: md.Timestamp}
		select {
		case out <- raw:
			r.next = md.Sequence.Stream + 1
			r.pending.Store(md.NumPending)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// stopConsumer stops the current iterator and deletes its consumer at
// once: a stopped iterator leaves its consumer on the server with its
// last pull request open, and the server would go on passing over the
// stream for it, and sending mail nobody reads, until the request expires
// and the consumer has been idle for readerInactive. Deleting it at once
// was most of the sharded zipf figure (0.11-0.18x -> 0.24-0.29x of raw,
// 64 shards: docs/bench-history.md).
func (r *reader) stopConsumer() {
	r.mu.Lock()
	it, name := r.it, r.name
	r.it, r.name = nil, ""
	r.mu.Unlock()
	if it == nil {
		return
	}
	it.Stop()
	r.deleteConsumer(name)
}

// deleteConsumer deletes consumer name, in the background.
func (r *reader) deleteConsumer(name string) {
	hd := handles.Of(r.h.wk.w)
	go func() {
		ctx, cancel := jsapi.WithTimeout(context.Background())
		defer cancel()
		_ = hd.JS.DeleteConsumer(ctx, wire.MailboxStream(r.h.wk.w.Name), name)
	}()
}
