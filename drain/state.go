package drain

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/fencing"
	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/store"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/world"
)

// ErrInvalidState wraps every refusal of a state key or size (wire's
// limits: keys of 1..64 bytes of [A-Za-z0-9_-], at most 64 keys and 256
// KiB per id, 16 KiB a value). A refused write stages nothing.
var ErrInvalidState = wire.ErrInvalidState

// ErrNoState: the world's bucket does not take atomic batches (a world
// created before per-id state; `fencepost world add` again turns them on).
var ErrNoState = world.ErrNoState

// State is an id's state as a handler sees it: every key as of the last
// message handed out before this one (committed, or acknowledged and on
// its way to commit with it), and the writes this handler staged. The
// writes are committed with the message's cursor in one atomic batch that
// carries the holding's fence: stored together, or not at all (and then
// the message is delivered again, to whoever holds the id, with the state
// as it was). So a message's effect on its id's state is applied exactly
// once (docs/design.md 3.12).
//
// A handler that returns an error drops its staged writes. A State is
// valid only during the handler call it was given to, and is not safe for
// concurrent use.
type State struct {
	b      *stateBook
	staged map[string][]byte // nil value: deleted
}

// Get returns the value of key (a copy) and whether it is set.
func (s *State) Get(key string) ([]byte, bool) {
	v, ok := s.get(key)
	if !ok {
		return nil, false
	}
	return bytes.Clone(v), true
}

func (s *State) get(key string) ([]byte, bool) {
	if v, ok := s.staged[key]; ok {
		return v, v != nil
	}
	v, ok := s.b.view[key]
	return v, ok
}

// Keys returns the keys that are set, sorted.
func (s *State) Keys() []string {
	var keys []string
	for k := range s.b.view {
		if v, ok := s.staged[k]; !ok || v != nil {
			keys = append(keys, k)
		}
	}
	for k, v := range s.staged {
		if _, ok := s.b.view[k]; !ok && v != nil {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// Put stages key = value. A key or size over the limits is refused with
// ErrInvalidState and stages nothing.
func (s *State) Put(key string, value []byte) error {
	if err := wire.ValidateStateKey(key); err != nil {
		return err
	}
	if err := wire.ValidateStateValue(key, value); err != nil {
		return err
	}
	old, had := s.get(key)
	keys, size := s.totals()
	if !had {
		keys++
		size += len(key)
	}
	size += len(value) - len(old)
	if keys > wire.MaxStateKeys {
		return fmt.Errorf("%w: %q would be key %d of the id's state, the limit is %d", ErrInvalidState, key, keys, wire.MaxStateKeys)
	}
	if size > wire.MaxStateBytes {
		return fmt.Errorf("%w: with %q the id's state would be %d bytes, the limit is %d", ErrInvalidState, key, size, wire.MaxStateBytes)
	}
	if !had && !s.used(key) {
		if n := s.subjects() + 1; n > wire.MaxStateSubjects {
			return fmt.Errorf("%w: %q would be key %d the id's state has used, the limit is %d (a deleted key counts until `fencepost state ID --delete`)", ErrInvalidState, key, n, wire.MaxStateSubjects)
		}
	}
	if value == nil {
		value = []byte{}
	}
	s.staged[key] = bytes.Clone(value)
	return nil
}

// Delete stages the removal of key (nothing if it is not set).
func (s *State) Delete(key string) error {
	if err := wire.ValidateStateKey(key); err != nil {
		return err
	}
	if _, had := s.get(key); !had {
		delete(s.staged, key) // a Put of this message undone, if any
		return nil
	}
	s.staged[key] = nil
	return nil
}

// used says whether key has a subject in the bucket, or will have once
// this message commits: set, deleted (a marker), or staged.
func (s *State) used(key string) bool {
	_, inView := s.b.view[key]
	_, gone := s.b.gone[key]
	_, staged := s.staged[key]
	return inView || gone || staged
}

// subjects counts the keys the id's state has used, as used counts them.
func (s *State) subjects() int {
	n := len(s.b.view) + len(s.b.gone)
	for k := range s.staged {
		_, inView := s.b.view[k]
		_, gone := s.b.gone[k]
		if !inView && !gone {
			n++
		}
	}
	return n
}

// totals counts the keys and bytes of the state as this handler sees it.
func (s *State) totals() (keys, size int) {
	keys, size = len(s.b.view), s.b.size
	for k, v := range s.staged {
		old, had := s.b.view[k]
		switch {
		case had && v == nil:
			keys--
			size -= wire.StateSize(k, old)
		case had:
			size += len(v) - len(old)
		case v != nil:
			keys++
			size += wire.StateSize(k, v)
		}
	}
	return keys, size
}

// StateHandler processes one message with its id's state: it reads st and
// stages writes in it, which commit with the message (see State).
// Returning nil acknowledges the message; an error drops the writes and
// leaves the message for redelivery, as a Handler's.
type StateHandler func(ctx context.Context, m Message, st *State) error

// Handler returns the Handler that runs sh with Message.State. The drain,
// holding or worker that runs it must be given state (WithState, HoldState,
// worker.Config.State): otherwise every message fails with ErrNoState.
func (sh StateHandler) Handler() Handler {
	return func(ctx context.Context, m Message) error {
		if m.State == nil {
			return fmt.Errorf("%w: a state handler given to a drain without state (drain.WithState, Drainer.HoldState, worker.Config.State)", ErrNoState)
		}
		return sh(ctx, m, m.State)
	}
}

// WithState makes a drain (Drain, DrainLease, Holding.Drain of a holding
// from HoldState) read the id's state and hand it to the handler in
// Message.State, and commit the staged writes with the cursor.
func WithState() RunOption { return func(o *runOptions) { o.state = true } }

// HoldState is Hold for a state handler: every run of the holding hands
// the id's state to the handler (Message.State) and commits its writes
// with the cursor. The world's bucket must take atomic batches
// (ErrNoState).
func (d *Drainer) HoldState(l *ownership.Lease) (*Holding, error) {
	if !d.w.AllowsState() {
		return nil, fmt.Errorf("drain: world %q: %w", d.world, ErrNoState)
	}
	h, err := d.Hold(l)
	if err != nil {
		return nil, err
	}
	h.book = &stateBook{}
	return h, nil
}

// IDState is one id's state as a delivery engine outside this package
// keeps it (package shard): the state as stored, and the writes of every
// message acknowledged since, which the next handler of the id sees. The
// engine commits the writes itself, with the cursor that covers their
// messages.
type IDState struct{ b stateBook }

// NewIDState starts from the stored state st.
func NewIDState(st store.StateRead) *IDState {
	s := &IDState{}
	s.b.set(st, 0)
	return s
}

// Message is the State the handler of the id's next message gets.
func (s *IDState) Message() *State { return s.b.message() }

// Ack takes an acknowledged message's staged writes into the id's state,
// and returns them, sorted by key (Value nil: a delete).
func (s *IDState) Ack(st *State) []store.StateWrite {
	s.b.ack(st)
	w := make([]store.StateWrite, 0, len(st.staged))
	for k, v := range st.staged {
		w = append(w, store.StateWrite{Key: k, Value: v})
	}
	slices.SortFunc(w, func(x, y store.StateWrite) int { return strings.Compare(x.Key, y.Key) })
	return w
}

// stateBook is what a holding (or a drain) knows of its id's state.
type stateBook struct {
	known bool
	// stored: the state as stored with the cursor storedAt.
	stored   map[string][]byte
	storedAt uint64
	// view: stored, and every write of a message acknowledged since.
	view map[string][]byte
	size int // of view
	// gone: keys deleted (their delete marker stays in the bucket: a
	// subject each, counted against wire.MaxStateSubjects).
	gone map[string]struct{}
	// dirty: keys written since they were last known stored with their
	// value in view. Every batch carries all of them, so that each batch
	// brings the stored state from the last confirmed one to its own
	// cursor, whatever became of the batches before it.
	dirty map[string]struct{}
}

// set starts the book from the stored state, as read with cursor at.
func (b *stateBook) set(st store.StateRead, at uint64) {
	b.known, b.storedAt = true, at
	b.stored, b.view, b.dirty, b.size = st.Values, make(map[string][]byte, len(st.Values)), map[string]struct{}{}, 0
	b.gone = make(map[string]struct{}, len(st.Gone))
	for k := range st.Gone {
		b.gone[k] = struct{}{}
	}
	for k, v := range st.Values {
		b.view[k] = v
		b.size += wire.StateSize(k, v)
	}
}

// forget drops what the book knows: the next run reads the state again.
func (b *stateBook) forget() {
	if b != nil {
		*b = stateBook{}
	}
}

// message returns the State a handler gets.
func (b *stateBook) message() *State { return &State{b: b, staged: map[string][]byte{}} }

// ack takes a handled message's writes into the view.
func (b *stateBook) ack(s *State) {
	for k, v := range s.staged {
		b.setView(k, v)
		b.dirty[k] = struct{}{}
		if v == nil {
			b.gone[k] = struct{}{} // its batch writes a delete marker
		} else {
			delete(b.gone, k)
		}
	}
}

// writes is what the next batch carries: every dirty key with its value
// in the view, sorted.
func (b *stateBook) writes() []store.StateWrite {
	if b == nil || len(b.dirty) == 0 {
		return nil
	}
	w := make([]store.StateWrite, 0, len(b.dirty))
	for k := range b.dirty {
		w = append(w, store.StateWrite{Key: k, Value: b.view[k]})
	}
	slices.SortFunc(w, func(x, y store.StateWrite) int { return strings.Compare(x.Key, y.Key) })
	return w
}

// stored takes a batch's writes as stored with the cursor at; a batch
// older than what the book already took is ignored (a later one carried
// all of its keys).
func (b *stateBook) confirm(w []store.StateWrite, at uint64) {
	if b == nil || !b.known || at <= b.storedAt {
		return
	}
	b.storedAt = at
	for _, x := range w {
		if x.Value == nil {
			delete(b.stored, x.Key)
		} else {
			b.stored[x.Key] = x.Value
		}
		if _, dirty := b.dirty[x.Key]; !dirty {
			// The view of a clean key is the stored value (a batch sent
			// again after the book was read afresh: Holding.settle).
			b.setView(x.Key, x.Value)
			continue
		}
		v, ok := b.view[x.Key]
		if ok == (x.Value != nil) && bytes.Equal(v, x.Value) {
			delete(b.dirty, x.Key)
		}
	}
}

// setView sets key's value in the view (nil: deleted).
func (b *stateBook) setView(key string, value []byte) {
	if old, had := b.view[key]; had {
		b.size -= wire.StateSize(key, old)
		delete(b.view, key)
	}
	if value != nil {
		b.view[key] = value
		b.size += wire.StateSize(key, value)
	}
}

// unshared (tests only: the bench that compares) sends each commit as a
// batch of its own.
var unshared bool

// publishCommitAsync is store.PublishCommit without waiting for the answer;
// shared: through the shared batches (jsapi.BatchQueue), behind the
// holding's other commits in the queue.
func (d *Drainer) publishCommitAsync(f fencing.Fence, cursorSubj string, cursor []byte, w []store.StateWrite, shared bool) (jetstream.PubAckFuture, error) {
	if shared && !unshared {
		return d.states.Send(store.StateMsgs(d.world, f, cursorSubj, cursor, w)), nil
	}
	if len(w) > 0 {
		return jsapi.PublishBatchAsync(d.js, store.StateMsgs(d.world, f, cursorSubj, cursor, w))
	}
	return d.js.PublishAsync(cursorSubj, cursor, f.Expect())
}

// publish is a run's commit write (store.PublishCommit). A holding's run with
// state sends its first attempt through the shared batches, behind any
// commit of its holding still queued there; a retry (the first one
// answered, refused) and a commit sent again from Holding.settle go on
// their own.
func (r *run) publish(ctx context.Context, cursor []byte, w []store.StateWrite, attempt int) (*jetstream.PubAck, error) {
	// A drain on the lock path (no holding: nothing of its id is ever
	// queued) sends a commit without writes as a plain fenced write.
	if r.st != nil && r.resend == nil && attempt == 1 && !unshared && (len(w) > 0 || r.bg != nil) {
		p := &sentCommit{ack: r.d.states.Send(store.StateMsgs(r.d.world, r.a.fence, r.cursorSubj, cursor, w))}
		p.wait(r.commitWait, r.d.nc)
		return p.pa, p.err
	}
	return store.PublishCommit(ctx, r.d.w, r.a.fence, r.cursorSubj, cursor, w)
}
