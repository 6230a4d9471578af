package drain

import (
	"context"
	"errors"
	"fmt"
	"time"

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
	iter   jetstream.MessagesContext
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
	if f.iter, err = cons.Messages(jetstream.PullMaxMessages(2 * r.d.batch)); err != nil {
		f.close()
		return nil, fmt.Errorf("drain: read %s: %w", r.subj, err)
	}
	return f, nil
}

// read hands out up to n messages from `from` on: it stops early once the
// last one says no more matched when it was delivered.
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
		m, err := f.iter.Next(jetstream.NextContext(ctx))
		if err != nil {
			return batchResult{}, fmt.Errorf("drain: read: %w", err)
		}
		md, err := m.Metadata()
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
// delivered again); the consumer is dropped.
var errFollowerMoved = errors.New("drain: consumer position moved")

// close stops the consumer and deletes it.
func (f *follower) close() {
	if f == nil {
		return
	}
	if f.iter != nil {
		f.iter.Stop()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = f.stream.DeleteConsumer(ctx, f.name)
}
