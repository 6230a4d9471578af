// Package follow reads a stream in stream order, from one goroutine, with
// an ordered consumer that is remade after every failure.
//
// nats.go's ordered Consume is not enough for a reader that routes each
// message by what came before it (the worker's feed, the checkers that
// rebuild a history). Its handler advances the consumer's cursor under the
// consumer's lock, then unlocks and calls the callback; a reset in between
// that is reported on another goroutine (a reconnect: a missed heartbeat
// or a deleted consumer is seen only after the callback returned) makes a
// new consumer from the cursor on, whose own goroutine may call the
// callback with the next message before the old goroutine's call with
// this one has run. The callback then sees x+1 before x, on two
// goroutines at once (nats.go v1.55.0, jetstream/ordered.go, Consume's
// internalHandler).
//
// Follow reads with the ordered consumer's Messages iterator instead, from
// one goroutine of its own: the iterator resets inside Next, after the
// caller had every message it returned, so the callback is called once per
// message, one at a time, in stream order, across resets.
package follow

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Follower is one stream being followed. Stop ends it.
type Follower struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	it     jetstream.MessagesContext // the iterator being read
	closed bool                      // ctx ended: no iterator is read again
}

// Options are what a Follower is told besides its stream and callback.
type Options struct {
	// Consumer is the ordered consumer to read with. Once a message was
	// handled, a remade consumer starts after the last one handled.
	Consumer jetstream.OrderedConsumerConfig
	// Pull are the iterator's options (its buffer).
	Pull []jetstream.PullMessagesOpt
	// Reset, when set, is called on the reading goroutine when the reader
	// failed (err: why) and before the first message from a consumer that
	// replaced another (err nil): a missed heartbeat, a deleted consumer,
	// a reconnect, an iterator that ended. No message is skipped by a
	// reset, but messages come late across it.
	Reset func(err error)
}

// Start follows s from the start opts.Consumer names and calls fn with
// each message and its metadata (or why it has none), in stream order, one
// at a time, from one goroutine, until ctx ends or Stop. The first
// consumer is made before Start returns; an error making it is returned.
func Start(ctx context.Context, s jetstream.Stream, opts Options, fn func(jetstream.Msg, *jetstream.MsgMetadata, error)) (*Follower, error) {
	it, err := open(ctx, s, opts.Consumer, opts.Pull)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	f := &Follower{cancel: cancel, done: make(chan struct{}), it: it}
	go func() {
		// Next takes no context: the iterator is stopped, and Next returns.
		<-ctx.Done()
		f.mu.Lock()
		f.closed = true
		f.it.Stop()
		f.mu.Unlock()
	}()
	go f.read(ctx, s, opts, it, fn)
	return f, nil
}

// Stop ends the following; it does not wait for it (Done).
func (f *Follower) Stop() { f.cancel() }

// Done is closed when the reading goroutine has ended: fn is not called
// again.
func (f *Follower) Done() <-chan struct{} { return f.done }

func open(ctx context.Context, s jetstream.Stream, cfg jetstream.OrderedConsumerConfig, pull []jetstream.PullMessagesOpt) (jetstream.MessagesContext, error) {
	cons, err := s.OrderedConsumer(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return cons.Messages(pull...)
}

// read is the one goroutine that calls fn.
func (f *Follower) read(ctx context.Context, s jetstream.Stream, opts Options, it jetstream.MessagesContext, fn func(jetstream.Msg, *jetstream.MsgMetadata, error)) {
	defer close(f.done)
	var (
		last     uint64 // the stream sequence of the last message handled
		consumer string // the consumer that gave it
		// wait: before the next remaking, when the last one gave no
		// message before it failed too (no remaking in a tight loop).
		wait time.Duration
	)
	reset := func(err error) {
		if opts.Reset != nil {
			opts.Reset(err)
		}
	}
	for {
		m, err := it.Next()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			// The iterator ended, or could not remake its consumer: a new
			// one starts after the last message handled.
			it.Stop()
			reset(err)
			if it = f.reopen(ctx, s, opts, last, wait, reset); it == nil {
				return
			}
			wait = backoff(wait)
			continue
		}
		wait = 0
		meta, err := m.Metadata()
		if err == nil {
			if consumer != "" && meta.Consumer != consumer {
				reset(nil)
			}
			consumer, last = meta.Consumer, meta.Sequence.Stream
		}
		fn(m, meta, err)
	}
}

// reopen makes the iterator that follows last, after wait, trying again
// with a backoff until ctx ends (nil).
func (f *Follower) reopen(ctx context.Context, s jetstream.Stream, opts Options, last uint64, wait time.Duration, reset func(error)) jetstream.MessagesContext {
	cfg := opts.Consumer
	if last > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq, cfg.OptStartTime = jetstream.DeliverByStartSequencePolicy, last+1, nil
	}
	for ; ; wait = backoff(wait) {
		if wait > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(wait):
			}
		}
		it, err := open(ctx, s, cfg, opts.Pull)
		if err == nil {
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.closed {
				it.Stop()
				return nil
			}
			f.it = it
			return it
		}
		reset(err)
	}
}

// backoff is the wait after wait: 100 ms at first, doubling up to 5 s.
func backoff(wait time.Duration) time.Duration {
	return min(max(2*wait, 100*time.Millisecond), 5*time.Second)
}
