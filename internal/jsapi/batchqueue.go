package jsapi

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// BatchQueue puts parts (each a group of messages that must be stored
// whole, such as one unit's state commit) into shared atomic batches:
// while one batch is in flight, the parts that come meanwhile wait and go
// out together in the next, up to MaxAtomicBatch messages. On a single
// file-backed replica each batch costs the server a synced store of its
// own (about 4-6.5 ms here: BenchmarkStateBatch in package drain) and the
// batches of a stream are applied one at a time, so one batch for many
// parts is what lets state commits keep up.
//
// A batch is stored whole or not at all, so each part is too. A batch
// refused because one part's expected check failed refuses every part:
// each sender then reads what it was fenced on, as after any refusal,
// and sends again on its own (PublishBatch), not through the queue, so a
// part that is refused for good never takes another down twice. Parts
// leave the queue in the order they came: a sender with at most one part
// in flight keeps its order.
type BatchQueue struct {
	js     jetstream.JetStream
	wait   time.Duration
	linger time.Duration

	mu        sync.Mutex
	queue     []*batchPart
	inflight  bool
	lingering bool // the first part of a batch waits for linger to pass
}

// NewBatchQueue returns a queue of batches to js. A batch whose answer
// does not come within wait (or whose connection closed) is an unknown
// outcome for each of its parts: context.DeadlineExceeded, or
// nats.ErrConnectionClosed. A part that finds the queue idle waits
// linger for others to join it (0: it goes at once): senders that make
// their parts at the same moment share one batch.
func NewBatchQueue(js jetstream.JetStream, wait, linger time.Duration) *BatchQueue {
	return &BatchQueue{js: js, wait: wait, linger: linger}
}

// batchPart is one part of a shared batch: its future.
type batchPart struct {
	msgs []*nats.Msg
	ok   chan *jetstream.PubAck
	err  chan error
}

func (p *batchPart) Ok() <-chan *jetstream.PubAck { return p.ok }
func (p *batchPart) Err() <-chan error            { return p.err }
func (p *batchPart) Msg() *nats.Msg               { return p.msgs[len(p.msgs)-1] }

// Send queues msgs as one part and returns its future: a PubAck with the
// sequence of its last message, or the batch's error.
func (q *BatchQueue) Send(msgs []*nats.Msg) jetstream.PubAckFuture {
	p := &batchPart{msgs: msgs, ok: make(chan *jetstream.PubAck, 1), err: make(chan error, 1)}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.queue = append(q.queue, p)
	if q.linger > 0 && !q.inflight && len(q.queue) == 1 {
		q.lingering = true
		time.AfterFunc(q.linger, func() {
			q.mu.Lock()
			defer q.mu.Unlock()
			q.lingering = false
			q.flushLocked()
		})
	}
	q.flushLocked()
	return p
}

// flushLocked sends the next batch of queued parts, unless one is in
// flight.
func (q *BatchQueue) flushLocked() {
	for !q.inflight && !q.lingering && len(q.queue) > 0 {
		n, k := 0, 0
		for k < len(q.queue) && (k == 0 || n+len(q.queue[k].msgs) <= MaxAtomicBatch) {
			n += len(q.queue[k].msgs)
			k++
		}
		parts := q.queue[:k:k]
		q.queue = q.queue[k:]
		all := make([]*nats.Msg, 0, n)
		for _, p := range parts {
			all = append(all, p.msgs...)
		}
		f, err := PublishBatchAsync(q.js, all)
		if err != nil {
			for _, p := range parts {
				p.err <- err
			}
			continue
		}
		q.inflight = true
		go q.await(f, parts, n)
	}
}

// await takes the answer of a batch (at most q.wait, and not once the
// connection closed), gives each part its own, and sends the next.
func (q *BatchQueue) await(f jetstream.PubAckFuture, parts []*batchPart, n int) {
	var (
		ack *jetstream.PubAck
		err error
	)
	t := time.NewTimer(q.wait)
	tick := time.NewTicker(50 * time.Millisecond)
wait:
	for {
		select {
		case ack = <-f.Ok():
			break wait
		case err = <-f.Err():
			break wait
		case <-t.C:
			err = context.DeadlineExceeded
			break wait
		case <-tick.C:
			if q.js.Conn().IsClosed() {
				err = nats.ErrConnectionClosed
				break wait
			}
		}
	}
	t.Stop()
	tick.Stop()
	if err != nil {
		for _, p := range parts {
			p.err <- err
		}
	} else {
		// The batch's messages are stored one after the other: the last
		// has the answer's sequence.
		end := n
		for i := len(parts) - 1; i >= 0; i-- {
			a := *ack
			a.Sequence = ack.Sequence - uint64(n-end)
			parts[i].ok <- &a
			end -= len(parts[i].msgs)
		}
	}
	q.mu.Lock()
	q.inflight = false
	q.flushLocked()
	q.mu.Unlock()
}

// Len is how many parts wait in the queue (behind a batch in flight).
func (q *BatchQueue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.queue)
}

// Hold keeps the queue from sending until release is called, as a batch
// in flight does: the tests of the senders use it to put parts behind
// one another on purpose.
func (q *BatchQueue) Hold() (release func()) {
	q.mu.Lock()
	q.inflight = true
	q.mu.Unlock()
	return func() {
		q.mu.Lock()
		defer q.mu.Unlock()
		q.inflight = false
		q.flushLocked()
	}
}
