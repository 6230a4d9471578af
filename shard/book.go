package shard

import (
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/wire"
)

// book is a held shard's account of the mail it read and has not yet
// committed: the only state the shard's cursor is computed from. It is
// owned by the holder's loop (no lock) and does no I/O, so the rule that
// makes a commit safe is here alone:
//
// A message of the shard leaves the mailbox when a cursor covering it is
// committed (wire.ShardCursor.Committed). The book only lets the mark
// pass a message that is done (handled, or dead-lettered) or excused (its
// id is pending, and the cursor names the id's first message not yet
// handled), and the reader hands it every message of the shard in stream
// order without a gap (an ordered consumer), starting at or below the
// lowest message the cursor it began from does not cover. So a cursor
// made by cursor() never covers a message no handler finished with.
type book struct {
	start wire.ShardCursor // the cursor the holding began from
	mark  uint64           // every message <= mark is done or excused
	read  uint64           // the last message read (0: none yet)
	// order: the messages read and not yet passed by the mark, in stream
	// order; order[head:] is live.
	order  []*entry
	head   int
	ids    map[string]*idq            // by token: the ids with mail not yet done
	pend   map[string]*wire.PendingID // by token: ids excused from the mark
	ready  []string                   // ids whose first message may be handed out
	queued int                        // messages read and not yet done
}

// entry is one message the book holds.
type entry struct {
	m     *jetstream.RawStreamMsg
	id    string // the id, decoded
	eid   string // its token
	done  bool   // handled or dead-lettered
	excus bool   // its id was pending when it was read or since
}

// idq is one id's mail not yet done, in stream order.
type idq struct {
	id       string
	msgs     []*entry
	busy     bool // its first message is with a handler (or a dead-letter write)
	waiting  bool // a retry is scheduled
	inReady  bool
	failures int    // failed deliveries of msgs[0]
	lastErr  string // the last failure's error
}

func newBook(start wire.ShardCursor) *book {
	b := &book{start: start, mark: start.Seq, ids: map[string]*idq{}, pend: map[string]*wire.PendingID{}}
	for eid, p := range start.Pending {
		b.pend[eid] = &wire.PendingID{Seq: p.Seq, Failures: p.Failures, Error: p.Error}
	}
	return b
}

// from is the first sequence the reader must hand the book.
func (b *book) from() uint64 { return b.start.Low() }

// add takes the next message of the shard in stream order. It returns
// false for a message the starting cursor already covers (skipped).
func (b *book) add(m *jetstream.RawStreamMsg, id, eid string) bool {
	b.read = max(b.read, m.Sequence)
	if b.start.Committed(eid, m.Sequence) {
		b.pass()
		return false
	}
	e := &entry{m: m, id: id, eid: eid}
	q := b.ids[eid]
	if q == nil {
		q = &idq{id: id}
		b.ids[eid] = q
		if p, ok := b.pend[eid]; ok && p.Seq == m.Sequence {
			q.failures, q.lastErr = p.Failures, p.Error
		}
	}
	if _, ok := b.pend[eid]; ok {
		e.excus = true
	}
	q.msgs = append(q.msgs, e)
	b.order = append(b.order, e)
	b.queued++
	if len(q.msgs) == 1 {
		b.makeReady(e.eid, q)
	}
	b.pass()
	return true
}

func (b *book) makeReady(eid string, q *idq) {
	if !q.busy && !q.waiting && !q.inReady && len(q.msgs) > 0 {
		q.inReady = true
		b.ready = append(b.ready, eid)
	}
}

// take returns the next id whose first message may be handed out, the
// message and its delivery number (1 for the first), and marks the id busy.
func (b *book) take() (*idq, *entry, int, bool) {
	for len(b.ready) > 0 {
		eid := b.ready[0]
		b.ready = b.ready[1:]
		q := b.ids[eid]
		if q == nil {
			continue
		}
		q.inReady = false
		if q.busy || q.waiting || len(q.msgs) == 0 {
			continue
		}
		q.busy = true
		return q, q.msgs[0], q.failures + 1, true
	}
	return nil, nil, 0, false
}

// takeOldest is take for the ready id whose first message is the oldest,
// so that the shard is handed out in stream order (a drain by hand, one
// call at a time: what it handled is then a front the mark can pass).
func (b *book) takeOldest() (*idq, *entry, int, bool) {
	best, bestSeq := -1, uint64(0)
	for i, eid := range b.ready {
		q := b.ids[eid]
		if q == nil || q.busy || q.waiting || len(q.msgs) == 0 {
			continue
		}
		if seq := q.msgs[0].m.Sequence; best < 0 || seq < bestSeq {
			best, bestSeq = i, seq
		}
	}
	if best > 0 {
		b.ready[0], b.ready[best] = b.ready[best], b.ready[0]
	}
	return b.take()
}

// done records that the first message of the id (token eid) was handled or
// dead-lettered.
func (b *book) done(eid string) {
	q := b.ids[eid]
	e := q.msgs[0]
	e.done = true
	q.msgs[0] = nil
	q.msgs = q.msgs[1:]
	q.busy, q.failures, q.lastErr = false, 0, ""
	b.queued--
	if p, ok := b.pend[eid]; ok {
		switch {
		case len(q.msgs) > 0:
			p.Seq, p.Failures, p.Error = q.msgs[0].m.Sequence, 0, ""
		case b.read >= b.start.Seq:
			// Everything of the shard up to the starting mark was read,
			// and nothing of this id is left: no exception needed.
			delete(b.pend, eid)
		default:
			// Messages of this id below the starting mark may be still
			// unread: keep the exception from the next one on.
			p.Seq, p.Failures, p.Error = e.m.Sequence+1, 0, ""
		}
	}
	if len(q.msgs) == 0 {
		delete(b.ids, eid)
	} else {
		b.makeReady(eid, q)
	}
	b.pass()
}

// failed records a failed delivery of the id's first message with error
// text herr. The id becomes pending (its mail excused from the mark) while
// there is room, so that the shard's other ids move on.
func (b *book) failed(eid, herr string) {
	q := b.ids[eid]
	q.busy = false
	q.failures++
	q.lastErr = herr
	p, ok := b.pend[eid]
	if !ok && len(b.pend) < wire.MaxPendingIDs {
		p = &wire.PendingID{}
		b.pend[eid] = p
		for _, e := range q.msgs {
			e.excus = true
		}
		ok = true
	}
	if ok {
		p.Seq, p.Failures, p.Error = q.msgs[0].m.Sequence, q.failures, herr
	}
	b.pass()
}

// hold marks the id as waiting for a retry; retry makes it ready again.
func (b *book) hold(eid string) {
	if q := b.ids[eid]; q != nil {
		q.waiting = true
	}
}

func (b *book) retry(eid string) {
	if q := b.ids[eid]; q != nil {
		q.waiting = false
		b.makeReady(eid, q)
	}
}

// release puts a busy id's first message back undelivered (the holding
// stopped before its handler was called).
func (b *book) release(eid string) {
	if q := b.ids[eid]; q != nil {
		q.busy = false
	}
}

// pass moves the mark over every message at the front that is done or
// excused; with nothing left, to the last message read.
func (b *book) pass() {
	for b.head < len(b.order) {
		e := b.order[b.head]
		if !e.done && !e.excus {
			break
		}
		b.mark = max(b.mark, e.m.Sequence)
		b.order[b.head] = nil
		b.head++
	}
	if b.head == len(b.order) {
		b.order, b.head = b.order[:0], 0
		b.mark = max(b.mark, b.read)
	} else if b.head > 1024 && b.head > len(b.order)/2 {
		b.order = append(b.order[:0], b.order[b.head:]...)
		b.head = 0
	}
}

// cursor is what the book may commit now: the mark, and the exceptions at
// or below it.
func (b *book) cursor() wire.ShardCursor {
	c := wire.ShardCursor{Seq: b.mark}
	for eid, p := range b.pend {
		if p.Seq <= b.mark {
			if c.Pending == nil {
				c.Pending = map[string]wire.PendingID{}
			}
			c.Pending[eid] = *p
		}
	}
	return c
}

// idle says whether nothing read is waiting to be handled.
func (b *book) idle() bool { return b.queued == 0 }
