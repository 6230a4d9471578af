package drain

import (
	"context"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/fencing"
	"github.com/fencepost/fencepost/internal/store"
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

// SharedBatch sends parts (each one id's commit: StateCommitMsgs) as the
// shared batches do when they meet behind a batch in flight: in one batch.
func SharedBatch(d *Drainer, parts [][]*nats.Msg) []jetstream.PubAckFuture {
	release := d.states.Hold()
	defer release()
	var fs []jetstream.PubAckFuture
	for _, msgs := range parts {
		fs = append(fs, d.states.Send(msgs))
	}
	return fs
}

// StateCommitMsgs is the batch of a state commit of f.ID: writes (a nil
// value deletes) and the cursor at seq, each with the fence.
func StateCommitMsgs(d *Drainer, f fencing.Fence, seq uint64, writes map[string][]byte) []*nats.Msg {
	var w []store.StateWrite
	for k, v := range writes {
		w = append(w, store.StateWrite{Key: k, Value: v})
	}
	data, err := wire.EncodeCursor(wire.Cursor{Seq: seq})
	if err != nil {
		panic(err)
	}
	return store.StateMsgs(d.world, f, wire.KeySubject(d.world, wire.CursorKey(f.ID)), data, w)
}

// Unshared makes state commits batches of their own (the comparison of
// BenchmarkStateWorker), for the test's duration.
func Unshared(t interface{ Cleanup(func()) }) {
	unshared = true
	t.Cleanup(func() { unshared = false })
}

// HoldQueue keeps the shared state batches' queue from sending (as a batch
// in flight does) until release is called.
func HoldQueue(d *Drainer) (release func()) { return d.states.Hold() }

// QueueLen is how many commits wait in the shared queue.
func QueueLen(d *Drainer) int { return d.states.Len() }

// SendPart puts one id's commit (StateCommitMsgs) in the shared queue.
func SendPart(d *Drainer, msgs []*nats.Msg) jetstream.PubAckFuture { return d.states.Send(msgs) }

// ConsumerRead is a consumer read (follow.go) for the tests.
type ConsumerRead struct{ c consumerRead }

// ErrConsumerGap is errConsumerGap.
var ErrConsumerGap = errConsumerGap

// ReadConsumer starts a consumer read of cons.
func ReadConsumer(nc *nats.Conn, cons jetstream.Consumer, opts ...jetstream.PullMessagesOpt) (*ConsumerRead, error) {
	c, err := readConsumer(nc, cons, opts...)
	return &ConsumerRead{c}, err
}

// Next is the read's next message.
func (r *ConsumerRead) Next(ctx context.Context) (jetstream.Msg, error) {
	m, _, err := r.c.next(ctx)
	return m, err
}

// Stop stops the read.
func (r *ConsumerRead) Stop() { r.c.iter.Stop() }

// ReadCursor is d's cursor read (batched on a single replica).
func ReadCursor(ctx context.Context, d *Drainer, id string) (wire.Cursor, uint64, error) {
	return d.readCursor(ctx, id)
}

// SweeperCursor is the stored cursor of id as the Sweeper follows it,
// taken or waiting to be judged (0: none yet).
func SweeperCursor(s *Sweeper, id string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return max(s.cursors[id], s.judge[id])
}

// SweepNow makes one sweep of s at once, on the caller's goroutine: a test
// runs s.Run with an interval that never comes, for its cursor watch.
func SweepNow(ctx context.Context, s *Sweeper) { s.sweep(ctx) }

// HoldingCommitWait is holdingCommitWait.
const HoldingCommitWait = holdingCommitWait

// NoAnswer is the future of a commit that is never answered (sent to a
// stream leader that died): neither an ack nor an error ever comes.
func NoAnswer(m *nats.Msg) jetstream.PubAckFuture {
	return &lostAnswer{msg: m, err: make(chan error)}
}
