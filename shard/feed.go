package shard

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/wire"
)

// A node's one reader of its shards' mail (docs/design.md, "A node's
// reader").
//
// The server passes over every stored message once for each consumer
// whose position is behind it, whether or not the message matches the
// consumer's filter: one consumer per held shard made the server's cost of
// a message grow with the number of shards a node holds. The feed reads
// the mail of all the shards the node's holders hold with one ordered
// consumer, filtered on their shards (the server matches a message against
// the filters once), and hands each message to its shard's holder.
//
// What each holder is promised is what its own consumer gave it: every
// message of its shard, in stream order, without a gap, from the
// sequence it asked for. The feed keeps, for each shard it serves, next,
// the sequence after the last message it handed that shard's holder. A
// consumer is made from the lowest next of the shards served, filtered on
// exactly those shards; an ordered consumer delivers every message its
// filters match, in stream order, starting again after the last one it
// delivered when it sees a gap; and the feed hands a message to its shard
// only when the message's sequence is at or past the shard's next (an
// earlier one the shard has, because a consumer made again starts at the
// lowest next of all). A message whose shard's holder cannot take it is
// not handed out and next stays before it, so the shard reads it again.
//
// The feed makes its consumer again whenever the set changes: a holder
// begins (add) or ends (remove), a holder that stopped taking mail is
// paused (left out of the filters until it takes mail again: it does not
// hold back the node's other shards), or resumed. Changes that come
// together (a node claiming its shards at start, a takeover) make one new
// consumer (feedSettle).
type feed struct {
	wk     *Worker
	prefix string // fp.<world>.ms.

	mu      sync.Mutex
	subs    map[int]*sub
	changed chan struct{} // capacity 1: the set of subs changed
}

// sub is one held shard's share of the feed.
type sub struct {
	q  int
	ch chan *jetstream.RawStreamMsg // to the holder; closed if the shard's mail cannot be read (broken)
	// next: the sequence after the last message handed to ch; broken:
	// ch is closed. Both are the reading's (under its lock), or the
	// feed's goroutine's between readings.
	next   uint64
	broken bool
	// paused: the holder did not take a message for pauseAfter; the feed
	// hands it nothing more, and reads without its filter, until the
	// holder resumes it.
	paused atomic.Bool
	gone   chan struct{} // closed by remove
}

// The feed's timings: feedSettle is how long a change waits for others
// before the consumer is made again; pauseAfter how long a holder may
// leave a message of its shard untaken before its shard is paused;
// feedRetry the first wait after a consumer could not be made (doubling
// to feedRetryMax).
const (
	feedSettle   = 5 * time.Millisecond
	pauseAfter   = 100 * time.Millisecond
	feedRetry    = 100 * time.Millisecond
	feedRetryMax = 2 * time.Second
	// subBuffer is a holder's channel's capacity.
	subBuffer = 256
)

func newFeed(wk *Worker) *feed {
	return &feed{
		wk:      wk,
		prefix:  "fp." + wk.w.Name + ".ms.",
		subs:    map[int]*sub{},
		changed: make(chan struct{}, 1),
	}
}

// add begins reading shard q from sequence from on, for its holder.
func (f *feed) add(q int, from uint64) *sub {
	s := &sub{q: q, ch: make(chan *jetstream.RawStreamMsg, subBuffer), next: max(from, 1), gone: make(chan struct{})}
	f.mu.Lock()
	if old := f.subs[q]; old != nil {
		// The shard's earlier holder ended without removing its sub
		// (it cannot: remove runs on every end); never two.
		close(old.gone)
	}
	f.subs[q] = s
	f.mu.Unlock()
	f.signal()
	return s
}

// remove stops reading s's shard.
func (f *feed) remove(s *sub) {
	f.mu.Lock()
	if f.subs[s.q] == s {
		delete(f.subs, s.q)
		close(s.gone)
	}
	f.mu.Unlock()
	f.signal()
}

// resume reads s's shard again after a pause.
func (f *feed) resume(s *sub) {
	if s.paused.CompareAndSwap(true, false) {
		f.signal()
	}
}

func (f *feed) signal() {
	select {
	case f.changed <- struct{}{}:
	default:
	}
}

// run reads until ctx ends, making the consumer again on every change.
func (f *feed) run(ctx context.Context) {
	var r *reading
	defer func() { r.stop() }()
	wait := feedRetry
	for {
		select {
		case <-ctx.Done():
			return
		case <-f.changed:
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(feedSettle):
		}
		// A change during the wait is in this round.
		select {
		case <-f.changed:
		default:
		}
		r.stop()
		r = nil
		served := f.served()
		if len(served) == 0 {
			continue
		}
		var err error
		r, err = f.read(ctx, served)
		if err != nil {
			f.wk.log.Warn("the shards' reader could not start; trying again", "shards", len(served), "retry_in", wait, "error", err)
			time.AfterFunc(wait, f.signal)
			wait = min(2*wait, feedRetryMax)
			continue
		}
		wait = feedRetry
	}
}

// served is the subs to read now: every sub not paused.
func (f *feed) served() map[int]*sub {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[int]*sub, len(f.subs))
	for q, s := range f.subs {
		if !s.paused.Load() && !s.broken {
			out[q] = s
		}
	}
	return out
}

// reading is one consumer of the feed, and the subs it serves.
type reading struct {
	f    *feed
	subs map[int]*sub
	cc   jetstream.ConsumeContext
	done chan struct{} // closed by stop, before it takes mu

	mu      sync.Mutex // held while a message is handed out
	stopped bool
}

// read makes a consumer of the served shards' mail from their lowest
// next on.
func (f *feed) read(ctx context.Context, served map[int]*sub) (*reading, error) {
	filters := make([]string, 0, len(served))
	var from uint64
	for q, s := range served {
		filters = append(filters, wire.ShardFilter(f.wk.w.Name, q))
		if from == 0 || s.next < from {
			from = s.next
		}
	}
	cctx, cancel := jsapi.WithTimeout(ctx)
	defer cancel()
	cons, err := handles.Of(f.wk.w).Mailbox.OrderedConsumer(cctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: filters,
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    from,
	})
	if err != nil {
		return nil, err
	}
	r := &reading{f: f, subs: served, done: make(chan struct{})}
	// A short heartbeat: a reader whose stream leader died (or whose
	// connection lost the consumer) notices within two heartbeats and
	// starts again after its last message, instead of after the
	// default's 15 s.
	r.cc, err = cons.Consume(r.hand,
		jetstream.PullMaxMessages(f.wk.cfg.ReadAhead),
		jetstream.PullExpiry(readerExpiry),
		jetstream.PullHeartbeat(readerHeartbeat),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			f.wk.log.Debug("shards' reader", "error", err)
		}))
	if err != nil {
		return nil, err
	}
	return r, nil
}

// stop ends r: once it returns, r hands out nothing more. It does not
// wait for the consumer's end (nats.go's ordered consumer can miss a stop
// while it makes its consumer again: docs/reliability.md section 6); a
// message it delivers later is dropped.
func (r *reading) stop() {
	if r == nil {
		return
	}
	close(r.done)
	r.mu.Lock()
	r.stopped = true
	r.mu.Unlock()
	r.cc.Stop()
}

// hand gives one message to its shard's holder (the consumer's callback:
// one at a time, in stream order).
func (r *reading) hand(m jetstream.Msg) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return
	}
	q := r.f.shardOf(m.Subject())
	s := r.subs[q]
	if s == nil {
		return
	}
	if s.paused.Load() {
		// Paused during this reading: it hands s nothing more, even if
		// s resumes before the next reading (what it skipped meanwhile
		// would be a gap); the next reading starts s at its next.
		delete(r.subs, q)
		return
	}
	md, err := m.Metadata()
	if err != nil {
		// Not skipped: the book must see every message of the shard, or
		// its mark could pass one unseen. The holding ends (its channel
		// closed), and the shard is claimed and read again.
		r.f.wk.log.Warn("shards' reader: a message without metadata; its shard's holding ends", "subject", m.Subject(), "error", err)
		s.broken = true
		close(s.ch)
		delete(r.subs, q)
		return
	}
	if md.Sequence.Stream < s.next {
		return // the holder has it (a consumer made again starts lower)
	}
	raw := &jetstream.RawStreamMsg{Subject: m.Subject(), Sequence: md.Sequence.Stream, Header: m.Headers(), Data: m.Data(), Time: md.Timestamp}
	select {
	case s.ch <- raw:
		s.next = raw.Sequence + 1
		return
	default:
	}
	t := time.NewTimer(pauseAfter)
	defer t.Stop()
	select {
	case s.ch <- raw:
		s.next = raw.Sequence + 1
	case <-t.C:
		// The holder takes no mail (its read-ahead is full, or it is
		// ending): pause its shard so that it holds back no other.
		s.paused.Store(true)
		delete(r.subs, q)
		r.f.signal()
	case <-s.gone:
		delete(r.subs, q)
	case <-r.done:
	}
}

// shardOf is the shard of a stored subject (fp.<w>.ms.<q>.<token>), -1
// if it names none.
func (f *feed) shardOf(subject string) int {
	rest, ok := strings.CutPrefix(subject, f.prefix)
	if !ok {
		return -1
	}
	qs, _, ok := strings.Cut(rest, ".")
	if !ok {
		return -1
	}
	q, err := strconv.Atoi(qs)
	if err != nil {
		return -1
	}
	return q
}
