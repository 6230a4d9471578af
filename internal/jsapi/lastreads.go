package jsapi

import (
	"context"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// LastReads batches reads of the last message of subjects of one stream
// into multi-last direct gets: a read that finds none running starts one
// at once, and the reads that come while it runs go out together in the
// next, at most MaxMultiLast subjects each. So a read never waits for
// others to join it, and every answer comes from a request sent after its
// read was asked for: on a single replica, which answers a direct get from
// the state every conditional write is checked against, it is the same
// read as one of its own. The answer is proven whole (DirectGet), so a
// subject absent from it has no message. ownership's holder checks and
// drain's cursor reads use it. The zero value is not usable: NewLastReads.
type LastReads struct {
	nc     *nats.Conn
	stream string

	mu      sync.Mutex
	queue   []*lastRead
	running bool
}

type lastRead struct {
	subj string
	m    *jetstream.RawStreamMsg // nil: the subject has no message
	err  error
	done chan struct{}
}

// NewLastReads reads the last messages of subjects of stream through nc.
func NewLastReads(nc *nats.Conn, stream string) *LastReads {
	return &LastReads{nc: nc, stream: stream}
}

// Read returns the last message of subj (nil: none). The read it shares is
// bounded by Timeout and by a drop of the connection (DirectGet); ctx
// bounds only this caller's wait.
func (lr *LastReads) Read(ctx context.Context, subj string) (*jetstream.RawStreamMsg, error) {
	r := &lastRead{subj: subj, done: make(chan struct{})}
	lr.mu.Lock()
	lr.queue = append(lr.queue, r)
	if !lr.running {
		lr.running = true
		go lr.run()
	}
	lr.mu.Unlock()
	select {
	case <-r.done:
		return r.m, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// run reads the queued subjects until the queue is empty.
func (lr *LastReads) run() {
	for {
		lr.mu.Lock()
		n := min(len(lr.queue), MaxMultiLast)
		if n == 0 {
			lr.running = false
			lr.mu.Unlock()
			return
		}
		batch := lr.queue[:n:n]
		lr.queue = lr.queue[n:]
		lr.mu.Unlock()
		lr.read(batch)
	}
}

func (lr *LastReads) read(batch []*lastRead) {
	subjects := make([]string, 0, len(batch))
	seen := make(map[string]bool, len(batch))
	for _, r := range batch {
		if !seen[r.subj] {
			seen[r.subj] = true
			subjects = append(subjects, r.subj)
		}
	}
	b, err := DirectGet(context.Background(), lr.nc, lr.stream, GetRequest{MultiLast: subjects})
	last := make(map[string]*jetstream.RawStreamMsg, len(b.Msgs))
	for _, m := range b.Msgs {
		last[m.Subject] = m
	}
	for _, r := range batch {
		r.m, r.err = last[r.subj], err
		close(r.done)
	}
}
