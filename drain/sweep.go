package drain

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/wire"
)

// Sweeper removes the committed messages of many ids with one purge
// (docs/design/pipeline.md point 5). A worker reads every mailbox message with one
// consumer, from the stream's first message on; it tells the Sweeper of each
// (Saw), and the Sweeper follows every stored cursor. The low-water mark is
// the sequence of the first message it saw whose id's stored cursor does
// not cover it; every mailbox message below it is covered by a stored
// cursor of its id, so one purge of all mailboxes below it removes only
// what per-id purges after each commit would have removed.
//
// A purge of one subject costs the server a search of the interleaved
// stream and a recount of every consumer's pending messages: under the
// fan-in bench per-id purges took a sixth of the server's CPU.
type Sweeper struct {
	d *Drainer

	mu      sync.Mutex
	seen    []sweepMsg        // messages seen and not known covered, in stream order
	cursors map[string]uint64 // id -> its stored cursor, judged genuine
	judge   map[string]uint64 // id -> a stored cursor above the last sequence known, to be judged
	top     uint64            // the highest mailbox sequence seen
	stuck   int               // sweeps in a row in which the mark did not move
	// last: id -> the sequence of its last message seen (Unread); nil
	// once it grew past lastMax ids (Unread then says true).
	last map[string]uint64

	swept atomic.Uint64 // every mailbox message below this was purged
	// missed: the caller's consumer delivered a message it could not
	// place (Missed); the mark passes no message from then on.
	missed bool
	rest   time.Time // no purge before this (sweepRest); Run's goroutine only
}

type sweepMsg struct {
	seq uint64
	id  string // "": a subject that encodes no id (never covered)
}

// NewSweeper returns a Sweeper of the drainer's world. It purges nothing
// until Run runs. From then on the drainer's holdings (Hold) leave their
// purges to it: a holding purges its id alone only what the sweeps have
// not removed after sweepGrace.
func (d *Drainer) NewSweeper() *Sweeper {
	s := &Sweeper{d: d, cursors: map[string]uint64{}, judge: map[string]uint64{}, last: map[string]uint64{}}
	d.sweeper.Store(s)
	return s
}

// sweepGrace is how long a holding leaves its committed messages to the
// sweeps (the mark can be held back by another id's mail) before it
// purges them itself.
const sweepGrace = 30 * time.Second

// SawID records a mailbox message that the caller's consumer delivered:
// its stream sequence and wire.MailboxID's id of its subject, or "" where
// that failed (a message no id's mailbox holds). The caller's consumer
// must deliver every message of every mailbox, in stream order, from the
// stream's first message on (an ordered consumer of the world's mailbox
// filter, DeliverAll): a message it skipped would be purged with the
// others. A worker's feed decodes each subject once, for its routing
// and for this.
func (s *Sweeper) SawID(seq uint64, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.missed {
		return // nothing is swept any more: keep nothing
	}
	if seq <= s.top {
		return
	}
	s.top = seq
	if id != "" && s.last != nil {
		if s.last[id] = seq; len(s.last) > lastMax {
			s.last = nil
		}
	}
	if c, ok := s.cursors[id]; ok && id != "" && c >= seq {
		return // committed before the consumer got to it
	}
	s.seen = append(s.seen, sweepMsg{seq, id})
}

// Missed records that the caller's consumer delivered a message the
// caller could not place (it came without its sequence): the Sweeper did
// not see it, so its mark could pass it while its id's cursor does not
// cover it. From then on the Sweeper purges nothing, and Unread says true
// for every id. Each holding then purges its own id once the mark stood
// still for sweepGrace. A new Sweeper (a new worker's) starts
// over from the stream's first message.
func (s *Sweeper) Missed() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.missed, s.last = true, nil
}

// lastMax bounds the ids whose last message a Sweeper remembers (about
// 100 bytes each).
const lastMax = 1_000_000

// Unread says whether the last message of id that the caller's consumer
// delivered is after the id's stored cursor, as far as the Sweeper knows:
// false only when every message of id seen so far is covered by a stored
// cursor it follows. A message the consumer has not delivered yet is not
// counted: the caller learns of it when it does. A worker uses it to leave
// an id whose holder went away unclaimed until mail comes for it.
func (s *Sweeper) Unread(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last == nil {
		return true
	}
	last, ok := s.last[id]
	return ok && s.cursors[id] < last
}

// Swept says below which sequence every mailbox message was purged.
func (s *Sweeper) Swept() uint64 { return s.swept.Load() }

// Run follows the world's cursors and sweeps every interval until ctx
// ends.
func (s *Sweeper) Run(ctx context.Context, every time.Duration) error {
	d := s.d
	w, err := handles.Of(d.w).KV.Watch(ctx, wire.CursorPrefix+"*")
	if err != nil {
		return fmt.Errorf("drain: sweep of %q: watch cursors: %w", d.world, err)
	}
	defer w.Stop()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("drain: sweep of %q: the watch of the cursors ended", d.world)
			}
			if e != nil {
				s.cursor(e)
			}
		case <-t.C:
			s.sweep(ctx)
		}
	}
}

// cursor takes a stored cursor. One above the highest sequence seen is
// judged at the next sweep against the stream's last sequence, as the
// server's purger judges them (purge.Purger.PurgeCommitted): a commit
// covers messages stored before it, so a cursor above the last sequence
// was written by no commit, and nothing is purged for it.
func (s *Sweeper) cursor(e jetstream.KeyValueEntry) {
	id, err := wire.DecodeID(strings.TrimPrefix(e.Key(), wire.CursorPrefix))
	if err != nil {
		return // names no mailbox (purge.Purger.PurgeCommitted reports such keys)
	}
	var seq uint64
	if e.Operation() == jetstream.KeyValuePut {
		c, err := wire.DecodeCursor(e.Value())
		if err != nil {
			return
		}
		seq = c.Seq
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if seq > s.top {
		s.judge[id] = seq
		return
	}
	delete(s.judge, id)
	s.cursors[id] = seq
}

// sweep moves the mark past covered messages and purges below it.
func (s *Sweeper) sweep(ctx context.Context) {
	if s.blind() {
		return
	}
	if err := s.judgeCursors(ctx); err != nil {
		return
	}
	mark, front, ok := s.mark()
	if !ok && front != 0 {
		// The first message seen is not covered: it may have been
		// removed by someone else (a drain's own purge, a message with
		// no id moved aside by fencepostd). Look every few sweeps.
		if s.stuck++; s.stuck%5 == 0 && s.gone(ctx, front) {
			s.mu.Lock()
			if len(s.seen) > 0 && s.seen[0].seq == front {
				s.seen = s.seen[1:]
			}
			s.mu.Unlock()
		}
	}
	if mark <= s.swept.Load() || time.Now().Before(s.rest) {
		return
	}
	s.stuck = 0
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	start := time.Now()
	err := s.d.purge(pctx, wire.MailboxFilter(s.d.world), mark)
	s.rest = restAfter(start, time.Now())
	if err != nil {
		if ctx.Err() == nil {
			s.d.log.Warn("drain: sweep of committed messages failed; the next one retries", "world", s.d.world, "below", mark, "error", err)
		}
		return
	}
	s.swept.Store(mark)
}

func (s *Sweeper) blind() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.missed
}

// sweepRest is how many times the length of its last purge a sweeper
// waits before the next: a purge of the mailbox filter walks every
// mailbox subject in the server (its per-subject index, under the
// stream's lock), so at a million ids with mail one took seconds, and a
// sweep every second by each worker kept the server busy with them and
// timed out. Paced, a sweeper's purges take at most a fifth of its time.
const sweepRest = 4

// restAfter says when the sweep after a purge that ran from start to end
// may purge again.
func restAfter(start, end time.Time) time.Time {
	return end.Add(sweepRest * end.Sub(start))
}

// mark drops the covered messages at the front of those seen and returns
// the low-water mark; ok is false when a message that is not covered
// holds it (front, its sequence).
func (s *Sweeper) mark() (mark, front uint64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := 0
	for i < len(s.seen) {
		m := s.seen[i]
		if c, ok := s.cursors[m.id]; !ok || m.id == "" || c < m.seq {
			break
		}
		i++
	}
	s.seen = s.seen[i:]
	if len(s.seen) == 0 {
		return s.top + 1, 0, true
	}
	if cap(s.seen) > 1024 && len(s.seen) < cap(s.seen)/4 {
		s.seen = append([]sweepMsg(nil), s.seen...)
	}
	return s.seen[0].seq, s.seen[0].seq, false
}

// judgeCursors judges the cursors above the highest sequence seen against
// the stream's last sequence (one read, only when there are some).
func (s *Sweeper) judgeCursors(ctx context.Context) error {
	s.mu.Lock()
	n := len(s.judge)
	s.mu.Unlock()
	if n == 0 {
		return nil
	}
	ictx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	info, err := handles.Of(s.d.w).Mailbox.Info(ictx)
	if err != nil {
		return err
	}
	last := info.State.LastSeq
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, seq := range s.judge {
		if seq <= last {
			s.cursors[id] = seq
		} else {
			s.d.log.Warn("drain: sweep: cursor above the mailbox stream's last sequence, which no commit writes; nothing purged for it", "world", s.d.world, "id", id, "seq", seq, "last_seq", last)
		}
		delete(s.judge, id)
	}
	return nil
}

// gone says whether the mailbox message at seq was removed.
func (s *Sweeper) gone(ctx context.Context, seq uint64) bool {
	b, err := jsapi.DirectGet(ctx, s.d.nc, wire.MailboxStream(s.d.world), jsapi.GetRequest{Seq: seq, Batch: 1})
	return err == nil && (len(b.Msgs) == 0 || b.Msgs[0].Sequence != seq)
}
