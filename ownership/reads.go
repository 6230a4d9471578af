package ownership

import (
	"context"
	"fmt"
	"sync"

	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/wire"
)

// recordReads batches Unchanged on a single-replica world: a call queues
// its record, and one goroutine at a time reads every queued record with
// one multi-last direct get (at most jsapi.MaxMultiLast per read). A call
// that arrives while a read is in flight waits for the next read, so every
// answer comes from a read sent after its call: the single replica answers
// from the state every conditional write is checked against, as the leader
// read it replaces does.
type recordReads struct {
	mu      sync.Mutex
	queue   []*recordRead
	running bool
}

type recordRead struct {
	subj string
	seq  uint64 // the record's last revision
	got  bool   // the record exists
	err  error
	done chan struct{}
}

func (rr *recordReads) unchanged(ctx context.Context, s *Store, id string, rev uint64) (bool, error) {
	r := &recordRead{subj: wire.RecordSubject(s.world, id), done: make(chan struct{})}
	rr.mu.Lock()
	rr.queue = append(rr.queue, r)
	if !rr.running {
		rr.running = true
		go rr.run(s)
	}
	rr.mu.Unlock()
	select {
	case <-r.done:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	if r.err != nil {
		return false, fmt.Errorf("ownership: read record of %q: %w", id, r.err)
	}
	return r.got && r.seq == rev, nil
}

// run reads queued records until the queue is empty.
func (rr *recordReads) run(s *Store) {
	for {
		rr.mu.Lock()
		n := min(len(rr.queue), jsapi.MaxMultiLast)
		if n == 0 {
			rr.running = false
			rr.mu.Unlock()
			return
		}
		batch := rr.queue[:n:n]
		rr.queue = rr.queue[n:]
		rr.mu.Unlock()
		rr.read(s, batch)
	}
}

func (rr *recordReads) read(s *Store, batch []*recordRead) {
	subjects := make([]string, 0, len(batch))
	seen := make(map[string]bool, len(batch))
	for _, r := range batch {
		if !seen[r.subj] {
			seen[r.subj] = true
			subjects = append(subjects, r.subj)
		}
	}
	b, err := jsapi.DirectGet(context.Background(), s.js.Conn(), wire.BucketStream(s.world), jsapi.GetRequest{MultiLast: subjects})
	last := make(map[string]uint64, len(b.Msgs))
	for _, m := range b.Msgs {
		last[m.Subject] = m.Sequence
	}
	for _, r := range batch {
		r.seq, r.got = last[r.subj]
		r.err = err
		close(r.done)
	}
}
