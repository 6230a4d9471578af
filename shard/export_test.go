package shard

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/ownership"
)

// Crash ends the worker's Run as a crash would: every holder stops at once
// (what it handled and did not commit is lost), and the node lease is left
// to lapse. The server cannot crash one client on demand; a process kill
// is the fault suite's.
func (wk *Worker) Crash() {
	wk.crash.Store(true)
	wk.mu.Lock()
	cancel := wk.cancel
	wk.mu.Unlock()
	if cancel != nil {
		cancel(errors.New("shard: crashed (test)"))
	}
}

// TestHolder is a holder of shard q under lease l, outside any worker's
// Run: for tests of its commits.
type TestHolder struct{ h *holder }

// NewTestHolder makes one for worker wk, its requests bounded by ctx.
func NewTestHolder(ctx context.Context, wk *Worker, q int, l *ownership.Lease) TestHolder {
	wk.rctx = ctx
	return TestHolder{wk.newHolder(q, l)}
}

// Commit commits c as the holder does.
func (th TestHolder) Commit(c wire.ShardCursor) error { return th.h.commit(c) }

// ReadCursor reads the shard's stored cursor as a holder does.
func (th TestHolder) ReadCursor() (wire.ShardCursor, error) { return th.h.readCursor() }

// ErrLost is errLost.
var ErrLost = errLost

// TestFeed is a worker's feed running outside its Run: for tests of what
// each shard's holder is handed.
type TestFeed struct{ f *feed }

// StartTestFeed runs wk's feed until ctx ends; wait waits for its end.
func StartTestFeed(ctx context.Context, wk *Worker) (tf TestFeed, wait func()) {
	done := make(chan struct{})
	go func() { defer close(done); wk.feed.run(ctx) }()
	return TestFeed{wk.feed}, func() { <-done }
}

// TestSub is one shard's share of a TestFeed.
type TestSub struct {
	f *feed
	s *sub
}

// Add begins reading shard q from sequence from, as a holder does.
func (tf TestFeed) Add(q int, from uint64) TestSub { return TestSub{tf.f, tf.f.add(q, from)} }

// Msgs is what the holder reads (closed when the shard cannot be read).
func (ts TestSub) Msgs() <-chan *jetstream.RawStreamMsg { return ts.s.ch }

// Remove ends the sub, as a holder's end does.
func (ts TestSub) Remove() { ts.f.remove(ts.s) }

// ResumeIfPaused is what a holder does before it reads: a paused shard is
// resumed.
func (ts TestSub) ResumeIfPaused() bool {
	if ts.s.paused.Load() {
		ts.f.resume(ts.s)
		return true
	}
	return false
}
