package ownership

import (
	"container/heap"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/wire"
)

// EventKind names an ownership change.
type EventKind string

// The changes Watch reports.
const (
	// EventClaimed: a node took the id with a new epoch, over a record
	// that was free, absent, deleted or lapsed.
	EventClaimed EventKind = "claimed"
	// EventRenewed: the holder extended its own lease (same node and
	// epoch). Ids backed by a node lease renew with it, silently.
	EventRenewed EventKind = "renewed"
	// EventReleased: the holder freed the id (or ended the node lease that
	// backed it).
	EventReleased EventKind = "released"
	// EventSeized: a node took the id with a new epoch while the previous
	// holder's lease was still live (a forced seize).
	EventSeized EventKind = "seized"
	// EventLapsed: the lease ran out. Nothing is written when a lease
	// lapses; the watcher reports it from a local timer at the published
	// expiry (of the record, or of the node lease that backs it).
	EventLapsed EventKind = "lapsed"
	// EventDeleted: the record was deleted or purged by another writer.
	EventDeleted EventKind = "deleted"
)

// Event is one ownership change of one id.
type Event struct {
	Kind     EventKind `json:"kind"`
	ID       string    `json:"id"`
	Node     string    `json:"node,omitempty"`
	Epoch    uint64    `json:"epoch,omitempty"`
	Expires  time.Time `json:"expires,omitzero"` // the new expiry; for lapsed, the one that passed
	Revision uint64    `json:"revision,omitempty"`
	// At is when it happened: the server's timestamp of the write, or for
	// a lapse the published expiry that passed.
	At time.Time `json:"at"`
	// NodeLease is the epoch of the node lease backing the id, or 0.
	NodeLease uint64 `json:"node_lease,omitempty"`
}

// Watch streams the ownership changes of id, or of every id of the world
// when id is "": every change written after Watch returns is reported (use
// Owner for the state before). The bucket keeps one revision per key, so
// writes to one id that follow each other faster than the watcher reads
// them may be folded into one event; the last event always shows the
// record's latest state. A kind is the change from the last state the
// watcher saw: a release folded into the claim after it reads as seized.
// The channel is closed when ctx ends; cancel ctx to stop. One goroutine
// serves the watch and ends with it.
//
// It watches the record keys (and the node lease keys, whose renewals keep
// node-backed ids alive) with a KV watch. A lapse writes nothing, so it is
// reported from a timer set to the published expiry of the lease: by the
// watcher's clock, which may differ from the holder's by the clock skew
// bound. A record that has already lapsed when the watch starts is not
// reported.
func (s *Store) Watch(ctx context.Context, id string) (<-chan Event, error) {
	keys := []string{wire.RecordPrefix + "*", wire.NodePrefix + "*", wire.ResetKey}
	if id != "" {
		if err := wire.ValidateID(id); err != nil {
			return nil, err
		}
		keys[0] = wire.RecordKey(id)
	}
	// Everything up to the bucket's last sequence now is the state before
	// the watch: the KV watch's own end-of-snapshot marker is not enough
	// (on a replicated bucket it can come before the snapshot's entries).
	str, err := s.js.Stream(ctx, wire.BucketStream(s.world))
	if err != nil {
		return nil, err
	}
	info, err := str.Info(ctx)
	if err != nil {
		return nil, err
	}
	kw, err := s.kv.WatchFiltered(ctx, keys)
	if err != nil {
		return nil, err
	}
	out := make(chan Event, 64)
	w := &watcher{
		s: s, out: out,
		ids:   map[string]*watchedID{},
		nodes: map[string]*watchedNode{},
		ready: make(chan struct{}),
		start: info.State.LastSeq,
	}
	go w.run(ctx, kw)
	select {
	case <-w.ready:
		return out, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

type watchedID struct {
	rec    wire.Record
	rev    uint64
	lapsed bool // reported (or known) lapsed
}

type watchedNode struct {
	rec    wire.Record
	rev    uint64
	known  bool              // a record was seen
	lapsed bool              // its lapse was handled
	ids    map[string]uint64 // ids naming this node's lease -> the session epoch they name
}

type watcher struct {
	s       *Store
	out     chan<- Event
	ids     map[string]*watchedID
	nodes   map[string]*watchedNode
	timers  expiryHeap
	initial bool          // the snapshot is over: report changes
	ready   chan struct{} // closed when initial is set
	start   uint64        // bucket sequence when the watch began
	quiet   bool          // the entry being handled is from before start
}

func (w *watcher) run(ctx context.Context, kw jetstream.KeyWatcher) {
	defer close(w.out)
	defer kw.Stop()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if len(w.timers) > 0 {
			timer.Reset(time.Until(w.timers[0].at))
		} else {
			timer.Reset(time.Hour)
		}
		select {
		case <-ctx.Done():
			return
		case e, ok := <-kw.Updates():
			if !ok {
				return
			}
			if e == nil {
				if !w.initial {
					w.initial = true
					close(w.ready)
				}
				continue
			}
			if !w.entry(ctx, e) {
				return
			}
		case <-timer.C:
			if !w.expire(ctx) {
				return
			}
		}
	}
}

// send reports ev once the snapshot is over; false when ctx ended.
func (w *watcher) send(ctx context.Context, ev Event) bool {
	if !w.initial || w.quiet {
		return true
	}
	select {
	case w.out <- ev:
		return true
	case <-ctx.Done():
		return false
	}
}

func (w *watcher) entry(ctx context.Context, e jetstream.KeyValueEntry) bool {
	w.quiet = e.Revision() <= w.start
	defer func() { w.quiet = false }()
	if e.Key() == wire.ResetKey {
		return w.reset(ctx, e)
	}
	var rec *wire.Record
	if e.Operation() == jetstream.KeyValuePut {
		r, err := wire.DecodeRecord(e.Value())
		if err != nil {
			w.s.log.Warn("watch: skipping a record that does not decode", "key", e.Key(), "rev", e.Revision(), "error", err)
			return true
		}
		rec = &r
	}
	if tok, ok := strings.CutPrefix(e.Key(), wire.NodePrefix); ok {
		node, err := wire.DecodeID(tok)
		if err != nil {
			return true
		}
		return w.nodeEntry(ctx, node, e, rec)
	}
	tok, _ := strings.CutPrefix(e.Key(), wire.RecordPrefix)
	id, err := wire.DecodeID(tok)
	if err != nil {
		return true
	}
	return w.idEntry(ctx, id, e, rec)
}

// reset handles a world reset (world.Reset): the purge removed every
// record and node lease without a marker per key, so each id known is
// reported deleted, in id order, and forgotten.
func (w *watcher) reset(ctx context.Context, e jetstream.KeyValueEntry) bool {
	if e.Operation() != jetstream.KeyValuePut {
		return true
	}
	ids := make([]string, 0, len(w.ids))
	for id := range w.ids {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	prev := w.ids
	w.ids, w.nodes = map[string]*watchedID{}, map[string]*watchedNode{}
	for _, id := range ids {
		st := prev[id]
		if !w.send(ctx, Event{Kind: EventDeleted, ID: id, Node: st.rec.Node, Epoch: st.rec.Epoch, Revision: e.Revision(), At: e.Created()}) {
			return false
		}
	}
	return true
}

func (w *watcher) node(node string) *watchedNode {
	n := w.nodes[node]
	if n == nil {
		n = &watchedNode{ids: map[string]uint64{}}
		w.nodes[node] = n
	}
	return n
}

// liveAt reports whether the id's last record was live at t, as far as
// this watcher knows.
func (w *watcher) liveAt(st *watchedID, t time.Time) bool {
	if st == nil || st.lapsed || st.rec.State != wire.StateHeld {
		return false
	}
	if !st.rec.Backed() {
		return t.Before(st.rec.Expires)
	}
	n := w.nodes[st.rec.Node]
	if n == nil || !n.known {
		return true // its node lease was not seen yet: assume live
	}
	return !n.lapsed && st.rec.LiveBacked(&n.rec, t)
}

func (w *watcher) idEntry(ctx context.Context, id string, e jetstream.KeyValueEntry, rec *wire.Record) bool {
	prev := w.ids[id]
	if prev != nil && prev.rec.Backed() {
		if n := w.nodes[prev.rec.Node]; n != nil {
			delete(n.ids, id)
		}
	}
	at := e.Created()
	if rec == nil {
		delete(w.ids, id)
		if prev == nil {
			return true
		}
		return w.send(ctx, Event{Kind: EventDeleted, ID: id, Node: prev.rec.Node, Epoch: prev.rec.Epoch, Revision: e.Revision(), At: at})
	}
	st := &watchedID{rec: *rec, rev: e.Revision()}
	w.ids[id] = st
	ev := Event{ID: id, Node: rec.Node, Epoch: rec.Epoch, Revision: e.Revision(), At: at, NodeLease: rec.NodeLease}
	switch {
	case rec.State == wire.StateFree:
		ev.Kind = EventReleased
	case prev != nil && prev.rec.State == wire.StateHeld && prev.rec.Epoch == rec.Epoch && prev.rec.Node == rec.Node:
		ev.Kind, ev.Expires = EventRenewed, rec.Expires
	case w.liveAt(prev, rec.Acquired):
		ev.Kind, ev.Expires = EventSeized, rec.Expires
	default:
		if prev != nil && prev.rec.State == wire.StateHeld && !prev.lapsed {
			// The takeover tells that the lease lapsed before the timer did.
			if !w.send(ctx, w.lapse(id, prev)) {
				return false
			}
		}
		ev.Kind, ev.Expires = EventClaimed, rec.Expires
	}
	if rec.State == wire.StateHeld {
		if rec.Backed() {
			n := w.node(rec.Node)
			n.ids[id] = rec.NodeLease
			if n.known && rec.BackedBy(&n.rec) {
				ev.Expires = n.rec.Expires
			}
		} else if rec.Expires.After(time.Now()) {
			heap.Push(&w.timers, expiry{at: rec.Expires, id: id, rev: st.rev})
		} else {
			st.lapsed = true
		}
	}
	return w.send(ctx, ev)
}

func (w *watcher) lapse(id string, st *watchedID) Event {
	st.lapsed = true
	ev := Event{Kind: EventLapsed, ID: id, Node: st.rec.Node, Epoch: st.rec.Epoch, Revision: st.rev, Expires: st.rec.Expires, NodeLease: st.rec.NodeLease}
	if n := w.nodes[st.rec.Node]; st.rec.Backed() && n != nil && st.rec.BackedBy(&n.rec) {
		ev.Expires = n.rec.Expires
	}
	ev.At = ev.Expires
	return ev
}

func (w *watcher) nodeEntry(ctx context.Context, node string, e jetstream.KeyValueEntry, rec *wire.Record) bool {
	n := w.node(node)
	prev, wasKnown := n.rec, n.known
	if rec == nil {
		n.rec, n.known = wire.Record{}, true
	} else {
		n.rec, n.known = *rec, true
	}
	n.rev = e.Revision()
	sameSession := wasKnown && prev.State == wire.StateHeld && rec != nil && rec.State == wire.StateHeld && rec.Epoch == prev.Epoch
	if sameSession {
		if !n.lapsed && rec.Expires.After(time.Now()) {
			heap.Push(&w.timers, expiry{at: rec.Expires, node: node, rev: n.rev})
		}
		return true
	}
	// The session the ids named ended (released, retired, deleted or
	// replaced): each id still on it is free now, unless reported lapsed.
	wasLive := wasKnown && prev.State == wire.StateHeld && !n.lapsed && e.Created().Before(prev.Expires)
	for id, epoch := range n.ids {
		st := w.ids[id]
		if st == nil || st.lapsed || !wasKnown || epoch != prev.Epoch {
			continue
		}
		var ev Event
		if wasLive {
			st.lapsed = true
			ev = Event{Kind: EventReleased, ID: id, Node: node, Epoch: st.rec.Epoch, Revision: st.rev, At: e.Created(), NodeLease: epoch}
		} else {
			ev = w.lapse(id, st)
		}
		if !w.send(ctx, ev) {
			return false
		}
	}
	for id, epoch := range n.ids {
		if rec == nil || epoch != rec.Epoch {
			delete(n.ids, id) // named an ended session: free for good
		}
	}
	n.lapsed = rec == nil || rec.State != wire.StateHeld
	if !n.lapsed {
		if rec.Expires.After(time.Now()) {
			heap.Push(&w.timers, expiry{at: rec.Expires, node: node, rev: n.rev})
		} else {
			n.lapsed = true
		}
	}
	return true
}

// expire handles every timer that is due.
func (w *watcher) expire(ctx context.Context) bool {
	now := time.Now()
	for len(w.timers) > 0 && !w.timers[0].at.After(now) {
		x := heap.Pop(&w.timers).(expiry)
		if x.node == "" {
			st := w.ids[x.id]
			if st == nil || st.rev != x.rev || st.lapsed || st.rec.State != wire.StateHeld {
				continue
			}
			if !w.send(ctx, w.lapse(x.id, st)) {
				return false
			}
			continue
		}
		n := w.nodes[x.node]
		if n == nil || n.rev != x.rev || n.lapsed {
			continue
		}
		for id, epoch := range n.ids {
			st := w.ids[id]
			if st == nil || st.lapsed || epoch != n.rec.Epoch {
				continue
			}
			if !w.send(ctx, w.lapse(id, st)) {
				return false
			}
		}
		n.lapsed = true
	}
	return true
}

// expiry is a pending lapse: of an id's own lease (node == "") or of a
// node lease.
type expiry struct {
	at       time.Time
	id, node string
	rev      uint64
}

type expiryHeap []expiry

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h expiryHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *expiryHeap) Push(x any)        { *h = append(*h, x.(expiry)) }
func (h *expiryHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
