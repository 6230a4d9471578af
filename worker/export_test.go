package worker

import (
	"context"
	"testing"
	"time"

	"github.com/fencepost/fencepost/ownership"
)

// Unread is Worker.unread.
func Unread(wk *Worker, id string) bool { return wk.unread(id) }

// Peers is the world's live nodes as wk last listed them (nil before its
// first listing).
func Peers(wk *Worker) []string {
	if p := wk.peers.Load(); p != nil {
		return *p
	}
	return nil
}

// Scans says how many scans wk made, and how many of them a miss asked for.
func Scans(wk *Worker) (all, afterMiss int64) { return wk.scans.Load(), wk.scansAfterMiss.Load() }

// ScansDone says how many of wk's scans ended.
func ScansDone(wk *Worker) int64 { return wk.scansDone.Load() }

// MarkMissed notes a missed candidate, as a full candidate channel does.
func MarkMissed(wk *Worker) { wk.missed.Store(true) }

// SetParkAfter sets how long a held id's goroutine waits idle before it
// parks (before Run).
func SetParkAfter(wk *Worker, d time.Duration) { wk.parkAfter = d }

// Serving is how many held ids' goroutines run now.
func Serving(wk *Worker) int64 { return wk.serving.Load() }

// SetFeedFault makes the setup of the worker's consumers fail while f
// returns an error (before Run).
func SetFeedFault(wk *Worker, f func() error) { wk.feedFault = f }

// EndMax is the most held ids seen sending their last writes at once while
// wk stopped, and the bound.
func EndMax(wk *Worker) (seen int64, bound int) { return wk.endMax.Load(), stopWrites }

// Partitions is how many partitions wk serves, and how many posts its
// partitioned feed received (0, 0 on a world without partitions).
func Partitions(wk *Worker) (served int, received int64) {
	if wk.parts == nil {
		return 0, 0
	}
	wk.parts.mu.Lock()
	defer wk.parts.mu.Unlock()
	return len(wk.parts.mine), wk.parts.received.Load()
}

// DrainRuns is how many of wk's deliveries drained from the cursor.
func DrainRuns(wk *Worker) int64 { return wk.drainRuns.Load() }

// Inbox is how many messages the inbox of id's holding holds, and its
// capacity (0, 0: not held, or parked without one).
func Inbox(wk *Worker, id string) (n, capacity int) {
	wk.mu.Lock()
	h := wk.held[id]
	wk.mu.Unlock()
	if h == nil {
		return 0, 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.inbox), cap(h.inbox)
}

// SetRepublishFault makes the partitioned feed drop a republished post
// whenever f returns true for it: a loss of core NATS delivery, which the
// server cannot be made to cause on demand.
func SetRepublishFault(wk *Worker, f func(seq uint64) bool) { wk.dropRepublished = f }

// Subscribed says whether a worker of a list of ids on a partitioned world
// has its ids' subscriptions in place at the server (parts.start holds
// the lock until they are flushed).
func Subscribed(wk *Worker) bool {
	p := wk.parts
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.listed != nil && len(p.own) == len(p.listed)
}

// Uncommitted is Worker.uncommitted: of ids, those whose mailbox may hold
// a message no stored cursor covers, and those whose every stored message
// is covered, each with its last message's sequence.
func Uncommitted(wk *Worker, ctx context.Context, ids []string) (keep []string, committed map[string]uint64) {
	keep, c := wk.uncommitted(ctx, ids)
	committed = map[string]uint64{}
	for _, m := range c {
		committed[m.id] = m.last
	}
	return keep, committed
}

// SetScanPurgeAfter sets how old a cursor must be before a scan purges
// what it covers, for the test's life.
func SetScanPurgeAfter(t testing.TB, d time.Duration) {
	old := scanPurgeAfter
	scanPurgeAfter = d
	t.Cleanup(func() { scanPurgeAfter = old })
}

// ScanPurges is how many purges of committed messages wk's scans made.
func ScanPurges(wk *Worker) int64 { return wk.scanPurges.Load() }

// SetScanReadBytes sets the bound of one read of last messages by the
// scan's filter, for the test's life.
func SetScanReadBytes(t testing.TB, n int) {
	old := scanReadBytes
	scanReadBytes = n
	t.Cleanup(func() { scanReadBytes = old })
}

// SetEventHook makes wk call f with each ownership event before it acts
// on it (before Run); f may block, as a watch that lags.
func SetEventHook(wk *Worker, f func(ownership.Event)) { wk.onEvent = f }

// SetClaimWait makes f's answer, when more than zero, the wait before a
// claim of id (before Run).
func SetClaimWait(wk *Worker, f func(id string) time.Duration) { wk.claimWaitFor = f }

// SetDispatchHooks makes wk call handled after it handled each candidate
// (free: a free event's) and claimed at the end of each claim, before the
// dispatcher learns of it; claimed may block, as a slow claim (before Run).
func SetDispatchHooks(wk *Worker, handled func(id string, free bool), claimed func(id string, heldByOther bool)) {
	wk.onCandidate, wk.onClaimed = handled, claimed
}
