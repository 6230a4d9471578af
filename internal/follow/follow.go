// Package follow reads a stream in stream order, from one goroutine, with
// a consumer of its own that is made again whenever the reading breaks.
// It is the one reader of fencepost's delivery: the per-id worker's feed
// and a shard's holder read their mail through it, and so do the bench's
// ledger and the test kit's history.
//
// Its consumer is an ephemeral one with no acks (R1, in memory), and it is
// made again, starting after the last message handed out, when the
// reading breaks: a missed heartbeat (the stream's leader died, or the
// consumer is gone), an error, or a gap in the consumer's delivery
// sequence. nats.go's ordered consumer does the same, with two faults for
// a reader like this one:
//
//   - Its Consume advances the consumer's cursor under the consumer's
//     lock, then unlocks and calls the callback; a reset in between (a
//     reconnect) makes a new consumer whose own goroutine may call the
//     callback with the next message before the old goroutine's call with
//     this one has run: x+1 before x, on two goroutines at once (nats.go
//     v1.55.0, jetstream/ordered.go). The worker's feed lost a message so.
//   - It makes the consumer again with requests of 10 s, 1 s to 10 s apart:
//     one sent while the stream had no leader held delivery for 10 s
//     (bench --cluster 3 --kill-leaders). Here each try is bounded by
//     createWait, and the next follows retryFirst later.
package follow

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
)

const (
	// A pull request lasts expiry, and the server sends a heartbeat every
	// heartbeat while it has nothing to send; two missed ones make the
	// consumer again.
	expiry    = 5 * time.Second
	heartbeat = 500 * time.Millisecond
	// createWait bounds one try at making the consumer; after a failed
	// one the next follows retryFirst later, doubling up to retryMax.
	createWait = 2 * time.Second
	retryFirst = 250 * time.Millisecond
	retryMax   = 2 * time.Second
	// inactive: how long the server keeps a consumer nobody pulls from
	// (one whose delete was lost, or whose create was answered late).
	inactive = 10 * time.Second
	// readAhead is the messages a pull asks for when Options say none.
	readAhead = 500
	// startWait bounds Start's making of the first consumer.
	startWait = 5 * time.Second
)

// Options say what a Follower reads and whom it tells of a reset.
type Options struct {
	// Filter are the subjects read; none: every subject of the stream.
	Filter []string
	// From is the first stream sequence read (0: the first stored).
	From uint64
	// ReadAhead bounds the messages delivered and not yet handed to the
	// callback (0: 500).
	ReadAhead int
	// Reset, when set, is called on the reading goroutine whenever the
	// reading broke (err: why), and whenever a try at making the consumer
	// again failed, before any message of the next consumer. No message
	// is skipped by a reset, but messages come late across it.
	Reset func(err error)
}

// Follower is one stream being followed. Stop ends it.
type Follower struct {
	s      jetstream.Stream
	opts   Options
	fn     func(jetstream.Msg, *jetstream.MsgMetadata, error)
	cancel context.CancelFunc
	done   chan struct{}

	next uint64 // the stream sequence to hand out from (the reading goroutine's)
	dseq uint64 // the current consumer's last delivery sequence (likewise)

	mu   sync.Mutex // guards it and name: Stop runs beside the reading
	it   jetstream.MessagesContext
	name string
	// pending: the messages stored after the last one handed out that
	// the filter matches, as the server last said.
	pending atomic.Uint64
}

// Start follows s from opts.From and calls fn with each message and its
// metadata (or why it has none), in stream order, one at a time, from one
// goroutine, until ctx ends or Stop. A message without metadata is handed
// out with the error and the reading goes on after it. The first consumer
// is made before Start returns, tried again for up to startWait (5 s; a
// missing stream is not tried again); an error making it is returned.
func Start(ctx context.Context, s jetstream.Stream, opts Options, fn func(jetstream.Msg, *jetstream.MsgMetadata, error)) (*Follower, error) {
	ctx, cancel := context.WithCancel(ctx)
	f := &Follower{s: s, opts: opts, fn: fn, cancel: cancel, done: make(chan struct{}), next: max(opts.From, 1)}
	sctx, scancel := context.WithTimeout(ctx, startWait)
	err := f.start(sctx, true)
	scancel()
	if err != nil {
		cancel()
		close(f.done)
		return nil, err
	}
	go func() {
		// Next takes no context: the iterator is stopped, and Next returns.
		<-ctx.Done()
		f.stopConsumer()
	}()
	go f.read(ctx)
	return f, nil
}

// Stop ends the following and deletes its consumer; it does not wait for
// the reading goroutine (Done).
func (f *Follower) Stop() { f.cancel() }

// Done is closed when the reading goroutine has ended: fn is not called
// again.
func (f *Follower) Done() <-chan struct{} { return f.done }

// Pending is the number of messages the filter matches stored after the
// last one handed out, as the server said with it (or when the consumer
// was made).
func (f *Follower) Pending() uint64 { return f.pending.Load() }

// errFatal: the reading cannot go on (the connection is closed).
var errFatal = errors.New("follow: cannot go on")

// read is the one goroutine that calls fn: it hands out the current
// consumer's messages and makes the consumer again whenever that breaks.
func (f *Follower) read(ctx context.Context) {
	defer close(f.done)
	for {
		err := f.pump(ctx)
		if ctx.Err() != nil || errors.Is(err, errFatal) {
			return
		}
		f.stopConsumer()
		if f.opts.Reset != nil {
			f.opts.Reset(err)
		}
		if err := f.start(ctx, false); err != nil {
			return // ctx ended, or the connection closed
		}
	}
}

// start makes a consumer from f.next on, and its iterator, trying again
// until ctx ends (each try bounded by createWait; after the first
// consumer, opts.Reset is told of each failure). A closed connection ends
// it at once, and so does a missing stream for the first consumer.
func (f *Follower) start(ctx context.Context, first bool) error {
	retry := retryFirst
	for {
		name := "fpf_" + strings.TrimPrefix(nats.NewInbox(), nats.InboxPrefix)
		cfg := jetstream.ConsumerConfig{
			Name:              name,
			DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
			OptStartSeq:       f.next,
			AckPolicy:         jetstream.AckNonePolicy,
			Replicas:          1,
			MemoryStorage:     true,
			InactiveThreshold: inactive,
		}
		if len(f.opts.Filter) == 1 {
			cfg.FilterSubject = f.opts.Filter[0]
		} else {
			cfg.FilterSubjects = f.opts.Filter
		}
		cctx, cancel := context.WithTimeout(ctx, createWait)
		cons, err := f.s.CreateConsumer(cctx, cfg)
		cancel()
		var it jetstream.MessagesContext
		if err == nil {
			n := f.opts.ReadAhead
			if n <= 0 {
				n = readAhead
			}
			it, err = cons.Messages(jetstream.PullMaxMessages(n), jetstream.PullExpiry(expiry),
				jetstream.PullHeartbeat(heartbeat), jetstream.WithMessagesErrOnMissingHeartbeat(true))
			if err != nil {
				f.deleteConsumer(name)
			}
		}
		if err == nil {
			f.mu.Lock()
			if ctx.Err() != nil {
				// Stopped while the consumer was being made: the stop
				// found none to delete.
				f.mu.Unlock()
				it.Stop()
				f.deleteConsumer(name)
				return ctx.Err()
			}
			f.it, f.name, f.dseq = it, name, 0
			f.mu.Unlock()
			f.pending.Store(cons.CachedInfo().NumPending)
			return nil
		}
		if errors.Is(err, nats.ErrConnectionClosed) || first && errors.Is(err, jetstream.ErrStreamNotFound) {
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w (last try: %w)", context.Cause(ctx), err)
		}
		if !first && f.opts.Reset != nil {
			f.opts.Reset(err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last try: %w)", context.Cause(ctx), err)
		case <-time.After(retry):
		}
		retry = min(2*retry, retryMax)
	}
}

// pump hands out the current consumer's messages until its reading breaks.
func (f *Follower) pump(ctx context.Context) error {
	f.mu.Lock()
	it, name := f.it, f.name
	f.mu.Unlock()
	if it == nil {
		return fmt.Errorf("%w: stopped", errFatal)
	}
	for {
		m, err := it.Next()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			if errors.Is(err, nats.ErrConnectionClosed) {
				return fmt.Errorf("%w: %w", errFatal, err)
			}
			return err
		}
		md, err := m.Metadata()
		if err != nil {
			// Handed out with why; taken as the consumer's next delivery,
			// so that the one after it is not a gap.
			f.dseq++
			f.fn(m, nil, err)
			continue
		}
		if md.Consumer != name {
			continue // an earlier consumer's, late
		}
		if md.Sequence.Consumer != f.dseq+1 || md.Sequence.Stream < f.next {
			// A gap (a delivery lost on the way), or a message handed
			// out already (a consumer the server moved and restarted
			// earlier): read again from the last one handed out.
			return fmt.Errorf("follow: delivery %d after %d (stream %d, next %d)", md.Sequence.Consumer, f.dseq, md.Sequence.Stream, f.next)
		}
		f.dseq = md.Sequence.Consumer
		f.next = md.Sequence.Stream + 1
		f.pending.Store(md.NumPending)
		f.fn(m, md, nil)
	}
}

// stopConsumer stops the current iterator and deletes its consumer at
// once: a stopped iterator leaves its consumer on the server with its
// last pull request open, and the server goes on passing over the stream
// for it, and sending mail nobody reads, until the request expires and the
// consumer has been idle for inactive. Deleting it at once was most of
// the sharded zipf figure (0.11-0.18x -> 0.24-0.29x of raw, 64 shards:
// docs/bench-history.md).
func (f *Follower) stopConsumer() {
	f.mu.Lock()
	it, name := f.it, f.name
	f.it, f.name = nil, ""
	f.mu.Unlock()
	if it == nil {
		return
	}
	it.Stop()
	f.deleteConsumer(name)
}

// deleteConsumer deletes consumer name, in the background.
func (f *Follower) deleteConsumer(name string) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = f.s.DeleteConsumer(ctx, name)
	}()
}
