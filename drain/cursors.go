package drain

import (
	"context"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/store"
	"github.com/fencepost/fencepost/internal/wire"
)

// readCursor reads id's cursor (store.ReadCursor's answer). On a single
// replica the reads of drains that begin at the same time go out together
// (cursorReads): a worker that claims many ids at once, as fan-in's and
// zipf's do, read each id's cursor with a request of its own, a tenth of
// a fan-in run's requests.
func (d *Drainer) readCursor(ctx context.Context, id string) (wire.Cursor, uint64, error) {
	if d.cfg.Replicas != 1 {
		return store.ReadCursor(ctx, d.w, id)
	}
	return d.cursors.read(ctx, d, id)
}

// cursorReads batches cursor reads into multi-last direct gets, as
// ownership's record reads are batched: a read that finds none running
// starts one at once, and the reads that come while it runs go out
// together in the next, up to jsapi.MaxMultiLast subjects each. So a read
// never waits for others to join it, and each is sent after it was asked
// for: it sees every cursor stored before that, as a read of its own
// would. On a single replica a direct get is answered from the state
// every write is checked against (store.ReadCursor). The answer is proven
// whole (jsapi.DirectGet's chain), so a cursor absent from it has no
// message, as a read of its own would have found with a 404.
type cursorReads struct {
	mu      sync.Mutex
	queue   []*cursorRead
	running bool
}

type cursorRead struct {
	subj string
	m    *jetstream.RawStreamMsg // the cursor key's last message; nil: none
	err  error
	done chan struct{}
}

func (cr *cursorReads) read(ctx context.Context, d *Drainer, id string) (wire.Cursor, uint64, error) {
	r := &cursorRead{subj: wire.KeySubject(d.world, wire.CursorKey(id)), done: make(chan struct{})}
	cr.mu.Lock()
	cr.queue = append(cr.queue, r)
	if !cr.running {
		cr.running = true
		go cr.run(d)
	}
	cr.mu.Unlock()
	select {
	case <-r.done:
	case <-ctx.Done():
		return wire.Cursor{}, 0, ctx.Err()
	}
	if r.err != nil {
		return wire.Cursor{}, 0, r.err
	}
	return store.CursorOf(id, r.m)
}

// run reads queued cursors until the queue is empty.
func (cr *cursorReads) run(d *Drainer) {
	for {
		cr.mu.Lock()
		n := min(len(cr.queue), jsapi.MaxMultiLast)
		if n == 0 {
			cr.running = false
			cr.mu.Unlock()
			return
		}
		batch := cr.queue[:n:n]
		cr.queue = cr.queue[n:]
		cr.mu.Unlock()
		cr.readBatch(d, batch)
	}
}

func (cr *cursorReads) readBatch(d *Drainer, batch []*cursorRead) {
	subjects := make([]string, 0, len(batch))
	seen := make(map[string]bool, len(batch))
	for _, r := range batch {
		if !seen[r.subj] {
			seen[r.subj] = true
			subjects = append(subjects, r.subj)
		}
	}
	// Bounded by jsapi.Timeout (and by a drop of the connection): the
	// waiters' contexts end their own waits.
	b, err := readLast(context.Background(), d.nc, wire.BucketStream(d.world), subjects)
	last := make(map[string]*jetstream.RawStreamMsg, len(b.msgs))
	for _, m := range b.msgs {
		last[m.Subject] = m
	}
	for _, r := range batch {
		r.m, r.err = last[r.subj], err
		close(r.done)
	}
}
