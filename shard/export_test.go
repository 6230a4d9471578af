package shard

import (
	"context"
	"errors"

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
