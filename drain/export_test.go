package drain

import (
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/wire"
)

// SetBeforeCommit installs a hook that runs after a batch was handled and
// before its fenced cursor write: tests land a seize or a renewal exactly
// there.
func SetBeforeCommit(d *Drainer, fn func(id string, c wire.Cursor)) { d.beforeCommit = fn }

// PauseLockRenewal makes d's drains stop renewing their lock, as a paused
// or cut-off process would: every renewal fails unsent, the lock lapses,
// and its Term's watchdog stops the drain at the lock's deadline.
func PauseLockRenewal(d *Drainer) { d.noRenew = true }

// ForgetCommitOutcome puts h in the state a commit of unknown outcome
// leaves it in (its answer never came): the real server cannot lose an
// answer on demand.
func ForgetCommitOutcome(h *Holding) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.known, h.owed, h.touch, h.live = false, nil, true, false
	h.book.forget()
}

// SetCommitFault makes fn send each of h's commits in place of send.
func SetCommitFault(h *Holding, fn func(send func() (jetstream.PubAckFuture, error)) (jetstream.PubAckFuture, error)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.fault = fn
}

// LostAnswer is the future of a commit whose answer never came (err).
func LostAnswer(m *nats.Msg, err error) jetstream.PubAckFuture {
	f := &lostAnswer{msg: m, err: make(chan error, 1)}
	f.err <- err
	return f
}

type lostAnswer struct {
	msg *nats.Msg
	err chan error
}

func (f *lostAnswer) Ok() <-chan *jetstream.PubAck { return nil }
func (f *lostAnswer) Err() <-chan error            { return f.err }
func (f *lostAnswer) Msg() *nats.Msg               { return f.msg }

// FenceRevision is the record revision h's commits expect now.
func FenceRevision(h *Holding) uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.fence.Revision
}

// LeaveToSweeps is leaveToSweeps.
var LeaveToSweeps = leaveToSweeps

// RestAfter is restAfter.
var RestAfter = restAfter

// SetStatListMax sets the most subjects WorldStat lists, for the test's
// duration.
func SetStatListMax(t interface{ Cleanup(func()) }, n int) {
	old := statListMax
	statListMax = n
	t.Cleanup(func() { statListMax = old })
}
