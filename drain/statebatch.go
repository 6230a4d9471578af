package drain

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/jsapi"
)

// stateCommits puts the commits of a drainer's state holdings (each an
// id's writes and cursor, design 3.12) into shared atomic batches: while
// one batch is in flight, the commits that come meanwhile, of any ids,
// wait and go out together in the next, up to JetStream's 1,000 messages.
// On a single file-backed replica each batch costs the server a synced
// store of its own (about 4-6.5 ms here) and the batches of a stream are
// applied one at a time, so one batch for many ids is what lets state
// commits keep up.
//
// A batch is stored whole or not at all: each id's part of it is, as
// alone. A batch refused because one id's fence moved refuses every part;
// each holding then reads its record as after any refusal (docs/design/pipeline.md point 3)
// and, still the holder, sends its commit again on its own (run.commit's
// retries bypass the queue). An id's commits keep their order: a holding
// has at most one commit in flight, its commits within a run go through
// the same queue, and parts leave the queue in order.
type stateCommits struct {
	mu       sync.Mutex
	queue    []*statePart
	inflight bool
}

// unshared (tests only: the bench that compares) sends each commit as a
// batch of its own.
var unshared bool

// statePart is one id's commit in a shared batch: its future.
type statePart struct {
	msgs []*nats.Msg
	ok   chan *jetstream.PubAck
	err  chan error
}

func (p *statePart) Ok() <-chan *jetstream.PubAck { return p.ok }
func (p *statePart) Err() <-chan error            { return p.err }
func (p *statePart) Msg() *nats.Msg               { return p.msgs[len(p.msgs)-1] }

// send queues msgs (one id's commit) and returns its future: a PubAck
// with the sequence of its last message, or the batch's error.
func (c *stateCommits) send(d *Drainer, msgs []*nats.Msg) jetstream.PubAckFuture {
	p := &statePart{msgs: msgs, ok: make(chan *jetstream.PubAck, 1), err: make(chan error, 1)}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.queue = append(c.queue, p)
	c.flushLocked(d)
	return p
}

// flushLocked sends the next batch of queued parts, unless one is in
// flight.
func (c *stateCommits) flushLocked(d *Drainer) {
	for !c.inflight && len(c.queue) > 0 {
		n, k := 0, 0
		for k < len(c.queue) && (k == 0 || n+len(c.queue[k].msgs) <= jsapi.MaxAtomicBatch) {
			n += len(c.queue[k].msgs)
			k++
		}
		parts := c.queue[:k:k]
		c.queue = c.queue[k:]
		all := make([]*nats.Msg, 0, n)
		for _, p := range parts {
			all = append(all, p.msgs...)
		}
		f, err := jsapi.PublishBatchAsync(d.js, all)
		if err != nil {
			for _, p := range parts {
				p.err <- err
			}
			continue
		}
		c.inflight = true
		go c.wait(d, f, parts, n)
	}
}

// wait takes the answer of a batch (at most holdingCommitWait: only
// holdings share batches; and not once
// the connection closed), gives each part its own, and sends the next.
func (c *stateCommits) wait(d *Drainer, f jetstream.PubAckFuture, parts []*statePart, n int) {
	var (
		ack *jetstream.PubAck
		err error
	)
	t := time.NewTimer(holdingCommitWait)
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
			if d.nc.IsClosed() {
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
	c.mu.Lock()
	c.inflight = false
	c.flushLocked(d)
	c.mu.Unlock()
}
