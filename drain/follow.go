package drain

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/jsapi"
)

// followThreshold: a drain that finds at least this many messages after its
// first batch reads the rest through a consumer, whose create and delete
// (two JetStream API calls) are then paid back many times over by the
// consumer's continuous delivery. Smaller mailboxes use batched direct gets
// only.
const followThreshold = 2 * DefaultBatch

// follower reads one mailbox through an ephemeral consumer that exists only
// for the duration of one drain: no acknowledgements (the fenced cursor is
// the acknowledgement), memory storage, one replica, and an inactivity
// threshold that removes it if the drainer dies without deleting it.
type follower struct {
	stream jetstream.Stream
	name   string
	msgs   consumerRead
	next   uint64 // the sequence after the last message handed out
	left   uint64 // messages after it when it was delivered
}

func (r *run) follow(ctx context.Context, from uint64) (*follower, error) {
	cons, err := handles.Of(r.d.w).Mailbox.CreateConsumer(ctx, jetstream.ConsumerConfig{
		FilterSubject:     r.subj,
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       from,
		AckPolicy:         jetstream.AckNonePolicy,
		MemoryStorage:     true,
		Replicas:          1,
		InactiveThreshold: max(r.d.lockTTL, 10*time.Second),
		Description:       "fencepost drain of " + r.a.id,
	})
	if err != nil {
		return nil, fmt.Errorf("drain: read %s: %w", r.subj, err)
	}
	f := &follower{stream: handles.Of(r.d.w).Mailbox, name: cons.CachedInfo().Name, next: from, left: 1}
	if f.msgs, err = readConsumer(r.d.nc, cons, jetstream.PullMaxMessages(2*r.d.batch)); err != nil {
		f.close()
		return nil, fmt.Errorf("drain: read %s: %w", r.subj, err)
	}
	return f, nil
}

// read hands out up to n messages from `from` on: it stops early once the
// last one says no more matched when it was delivered. errFollowerMoved:
// the drain is to read from `from` itself (the follower is elsewhere, or
// lost messages on the way).
func (f *follower) read(ctx context.Context, from uint64, n int) (batchResult, error) {
	if from != f.next {
		return batchResult{}, errFollowerMoved
	}
	// Bounded as a direct get is: a consumer lost with a server restart
	// (it is kept in memory) ends the read instead of hanging it.
	ctx, cancel := jsapi.WithTimeout(ctx)
	defer cancel()
	var out batchResult
	for len(out.msgs) < n && f.left > 0 {
		m, md, err := f.msgs.next(ctx)
		if errors.Is(err, errConsumerGap) {
			// Nothing of out was handed out: the drain reads it again.
			return batchResult{}, errFollowerMoved
		}
		if err != nil {
			return batchResult{}, fmt.Errorf("drain: read: %w", err)
		}
		out.msgs = append(out.msgs, &jetstream.RawStreamMsg{
			Subject: m.Subject(), Sequence: md.Sequence.Stream, Header: m.Headers(), Data: m.Data(), Time: md.Timestamp,
		})
		f.next, f.left = md.Sequence.Stream+1, md.NumPending
	}
	out.pending = f.left
	return out, nil
}

// errFollowerMoved: the drain reads from elsewhere (a failed message is
// delivered again, or the follower lost messages on the way); the
// consumer is dropped.
var errFollowerMoved = errors.New("drain: consumer position moved")

// close stops the consumer and deletes it.
func (f *follower) close() {
	if f == nil {
		return
	}
	if f.msgs.iter != nil {
		f.msgs.iter.Stop()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = f.stream.DeleteConsumer(ctx, f.name)
}

// consumerRead reads the messages of an AckNone consumer (a follower's)
// and proves that none was lost on the way. The server never sends such a
// consumer's message again, and nats.go's pull iterator goes on after a
// reconnect as if nothing had happened: what was on its way when the
// connection broke is skipped, and a reader that takes what comes next
// for what follows would hand out messages past the lost ones and commit
// over them (a cut proxy lost a drain's messages so:
// TestDrain_DeepMailbox_CutWhileFollowing). Each message's delivery
// sequence must follow the last one's; a reader that waits while the
// connection was made again may have lost the tail, after which nothing
// comes to show the gap. Either is errConsumerGap, and the caller reads
// from its cursor instead.
type consumerRead struct {
	iter       jetstream.MessagesContext
	nc         *nats.Conn
	dseq       uint64 // the delivery sequence of the last message read
	reconnects uint64 // the connection's reconnects when the read began
}

// errConsumerGap: messages of a consumer read may have been lost on the
// way (consumerRead).
var errConsumerGap = errors.New("drain: messages of a consumer read were lost on the way")

// gapPoll is how often a consumer read that waits for its next message
// looks for a reconnect.
const gapPoll = 100 * time.Millisecond

// readConsumer starts reading cons's messages with opts.
func readConsumer(nc *nats.Conn, cons jetstream.Consumer, opts ...jetstream.PullMessagesOpt) (consumerRead, error) {
	reconnects := nc.Stats().Reconnects
	iter, err := cons.Messages(opts...)
	if err != nil {
		return consumerRead{}, err
	}
	return consumerRead{iter: iter, nc: nc, reconnects: reconnects}, nil
}

// next is the consumer's next message and its metadata; errConsumerGap if
// messages before it may have been lost.
func (c *consumerRead) next(ctx context.Context) (jetstream.Msg, *jetstream.MsgMetadata, error) {
	for {
		wctx, cancel := context.WithTimeout(ctx, gapPoll)
		m, err := c.iter.Next(jetstream.NextContext(wctx))
		cancel()
		if err != nil {
			if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
				if c.nc.Stats().Reconnects != c.reconnects {
					return nil, nil, errConsumerGap
				}
				continue
			}
			return nil, nil, err
		}
		md, err := m.Metadata()
		if err != nil {
			return nil, nil, err
		}
		if md.Sequence.Consumer != c.dseq+1 {
			return nil, nil, errConsumerGap
		}
		c.dseq = md.Sequence.Consumer
		return m, md, nil
	}
}
