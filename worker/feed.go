package worker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/follow"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/ownership"
)

// inboxSize is how many messages a held id's inbox holds at first (see
// holding); an inbox that overflowed while its id drained grows, up to
// maxInboxSize (holding.grow), until the holding parks.
const (
	inboxSize    = 256
	maxInboxSize = 8192
)

// startFeed starts the feed, again and again while its setup fails for a
// reason that passes (a request timed out, no JetStream responder: a
// loaded or electing server), with a backoff up to 5 s, until ctx ends.
// Four workers starting at once beside a million mailboxes timed out
// creating their consumers, and a worker that gave up at its start left
// its node's share of the ids to the others' fallbacks.
func (wk *Worker) startFeed(ctx context.Context, wg *sync.WaitGroup, cand chan<- candidate) error {
	backoff := 500 * time.Millisecond
	for {
		err := wk.feed(ctx, wg, cand)
		if err == nil || ctx.Err() != nil || !passing(err) {
			return err
		}
		wk.log.Warn("the worker's consumers could not be made; trying again", "error", err, "in", backoff)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// passing says whether err is of a kind that passes: a request that timed
// out or found no JetStream responder, or JetStream answering that it is
// unavailable for now (503: a cluster without a meta or stream leader, as
// right after a partition heals).
func passing(err error) bool {
	var api *jetstream.APIError
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoHeartbeat) ||
		errors.As(err, &api) && api.Code == 503
}

// feed starts the three sources of candidate ids: posts to mailboxes (an
// ordered consumer of the mailbox subjects, new messages only: one per
// worker, not per id; a held id's messages go to its inbox, another id's
// make it a candidate), ownership changes (a lapse or release makes an id
// claimable) and a periodic scan of the mailbox stream (the backstop).
func (wk *Worker) feed(ctx context.Context, wg *sync.WaitGroup, cand chan<- candidate) error {
	if wk.feedFault != nil {
		if err := wk.feedFault(); err != nil {
			return fmt.Errorf("worker: follow posts: %w", err)
		}
	}
	stopPosts, err := wk.followPosts(ctx, cand)
	if err != nil {
		return err
	}
	events, err := wk.own.Watch(ctx, "")
	if err != nil {
		stopPosts()
		return fmt.Errorf("worker: watch ownership: %w", err)
	}
	if wk.sweep != nil {
		wg.Go(func() {
			// While the sweep does not run each id purges its own
			// (docs/design/pipeline.md point 5): it starts again after a failure (its cursor watch
			// could not be made, or ended) until ctx ends.
			backoff := 500 * time.Millisecond
			for {
				err := wk.sweep.Run(ctx, time.Second)
				if ctx.Err() != nil {
					return
				}
				wk.log.Warn("the sweep of committed messages stopped; each id purges its own until it runs again", "error", err, "in", backoff)
				select {
				case <-ctx.Done():
					return
				case <-time.After(backoff):
				}
				backoff = min(2*backoff, 5*time.Second)
			}
		})
	}
	wg.Add(2)
	go func() {
		defer wg.Done()
		defer stopPosts()
		for ev := range events {
			if wk.onEvent != nil {
				wk.onEvent(ev)
			}
			if h := wk.holding(ev.ID); h != nil && h.lost != nil && ev.Epoch > h.lease.Epoch {
				// A newer epoch is on the record: stop this holding's
				// drain and handler now, not at its next commit.
				h.lost(fmt.Errorf("%w: %s by node %q at epoch %d", errTakenOver, ev.Kind, ev.Node, ev.Epoch))
			}
			if wk.parts != nil && (ev.Kind == ownership.EventClaimed || ev.Kind == ownership.EventSeized || ev.Kind == ownership.EventDeleted) {
				// Taken (or gone): its holder has its mail (parts.mail).
				// This worker's own release is not here: serve clears
				// the mail when it decides to release. A post can come
				// between the release and its event, and its mail is
				// not handed out (TestPartitioned_PostBeforeOwnRelease).
				wk.parts.clearMail(ev.ID)
			}
			switch ev.Kind {
			case ownership.EventLapsed, ownership.EventReleased, ownership.EventDeleted:
				wk.mu.Lock()
				wk.kept.free(ev.ID)
				wk.mu.Unlock()
				if ev.Kind == ownership.EventLapsed && ev.NodeLease != 0 && wk.dropPeer(ev.Node) {
					// Its node lease lapsed: it is gone. Once per node,
					// not at each of the ids it held (a dead node's
					// thousands of lapses each reassigned every
					// partition: 4% of a zipf owner's CPU).
					wk.reassign(ctx)
				}
				if wk.wants(ev.ID) {
					wk.propose(cand, candidate{ev.ID, fromFree})
				}
			case ownership.EventClaimed, ownership.EventSeized:
				if ev.Node != wk.cfg.Node && wk.wants(ev.ID) {
					// Another node serves it: what this worker kept of it
					// goes (kept.go), and it is no candidate here.
					wk.mu.Lock()
					wk.kept.drop(ev.ID)
					wk.mu.Unlock()
					wk.propose(cand, candidate{ev.ID, fromTaken})
				}
			}
		}
	}()
	wg.Go(func() {
		// Often: a node that starts is a new id's first choice for every
		// worker only once they all listed it.
		t := time.NewTicker(min(max(wk.cfg.TTL/4, 100*time.Millisecond), 500*time.Millisecond))
		defer t.Stop()
		for {
			wk.listPeers(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
	go func() {
		defer wg.Done()
		t := time.NewTicker(wk.cfg.Scan)
		defer t.Stop()
		for n := 0; ; n++ {
			switch {
			case wk.missed.Swap(false):
				wk.scansAfterMiss.Add(1)
				wk.scan(ctx, cand)
			case n%scanBackstop == 0:
				wk.scan(ctx, cand)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return nil
}

// followPosts starts following posts to mailboxes: one ordered consumer of
// every post (or of the worker's ids), or on a partitioned world the
// partitions' subscriptions (parts.go). A held id's messages go to its
// inbox, another id's make it a candidate. stop ends it.
func (wk *Worker) followPosts(ctx context.Context, cand chan<- candidate) (stop func(), err error) {
	if wk.parts != nil {
		if err := wk.startParts(cand); err != nil {
			wk.parts.stop()
			return nil, fmt.Errorf("worker: follow posts: %w", err)
		}
		return wk.parts.stop, nil
	}
	// A worker of every id reads the whole mailbox stream, dead letters
	// included (skipped below): a consumer whose filter is not the
	// stream's every subject makes the server search each block for the
	// next match (fileStore.firstMatching), and dead letters are rare. A
	// worker of a few ids reads theirs, of many every mailbox.
	var filter []string
	switch {
	case len(wk.ids) > 64:
		filter = []string{wire.MailboxFilter(wk.w.Name)}
	case wk.ids != nil:
		for id := range wk.ids {
			filter = append(filter, wire.MailboxSubject(wk.w.Name, id))
		}
	}
	// With a sweep the consumer reads every message from the first on
	// (the sweep must see each); without, from the next one stored. Never
	// "new": a start read once is the same on every remaking of the
	// consumer, and "new" would skip what was stored in between, which no
	// inbox would ever get (the soak lost three messages so, a cluster
	// member killed under a fresh worker, with nats.go's ordered consumer).
	opts := follow.Options{Filter: filter}
	if wk.sweep == nil {
		info, err := handles.Of(wk.w).Mailbox.Info(ctx)
		if err != nil {
			return nil, fmt.Errorf("worker: follow posts: %w", err)
		}
		opts.From = info.State.LastSeq + 1
	}
	// One goroutine handles the posts, in stream order (internal/follow):
	// a holding whose posts carry no predecessor takes the next one
	// first, and must never get x+1 before x.
	opts.Reset = func(err error) {
		// A new consumer: no post was skipped, but every held id drains
		// from its cursor before it takes its inbox again, and the ids
		// not held are scanned for.
		wk.log.Debug("follow posts: consumer replaced", "error", err)
		wk.gapAll()
		wk.missed.Store(true)
	}
	posts, err := follow.Start(ctx, handles.Of(wk.w).Mailbox, opts, func(m jetstream.Msg, meta *jetstream.MsgMetadata, err error) {
		if err != nil {
			wk.log.Warn("follow posts: a message without metadata", "subject", m.Subject(), "error", err)
			wk.gapAll()
			if wk.sweep != nil {
				wk.sweep.Missed() // its mark must not pass what it did not see
			}
			return
		}
		// The subject is decoded once, for the sweep and the routing.
		tok, ok := wire.MailboxToken(wk.w.Name, m.Subject())
		if !ok {
			return // a dead letter: not a post, and no purge of posts removes it
		}
		id, err := wire.DecodeID(tok)
		if wk.sweep != nil {
			if err != nil {
				wk.sweep.SawID(meta.Sequence.Stream, "")
			} else {
				wk.sweep.SawID(meta.Sequence.Stream, id)
			}
		}
		if err != nil || !wk.wants(id) {
			return
		}
		sm := &jetstream.RawStreamMsg{Subject: m.Subject(), Sequence: meta.Sequence.Stream, Header: m.Headers(), Data: m.Data(), Time: meta.Timestamp}
		if !wk.route(id, sm, func() { wk.kept.add(id, sm) }) {
			wk.propose(cand, candidate{id, fromPost})
		}
	})
	if err != nil {
		return nil, fmt.Errorf("worker: follow posts: %w", err)
	}
	return posts.Stop, nil
}

// propose offers a candidate. One the channel has no room for is noted,
// and the next scan finds it again.
func (wk *Worker) propose(cand chan<- candidate, c candidate) {
	select {
	case cand <- c:
	default:
		wk.missed.Store(true)
	}
}

// scanBackstop: the scan (a listing of every mailbox subject, a cost that
// grows with the ids) runs at the start, after a candidate was dropped or
// the posts' consumer failed, and every scanBackstop periods in any case.
// Every period, it listed 100,000 subjects per worker every ttl while the
// worker drained them.
const scanBackstop = 6

func (wk *Worker) wants(id string) bool { return wk.ids == nil || wk.ids[id] }

// scan offers every id whose mailbox holds messages that no stored cursor
// covers, and purges the committed messages of the others (uncommitted,
// purgeCommitted).
func (wk *Worker) scan(ctx context.Context, cand chan<- candidate) {
	wk.scans.Add(1)
	defer wk.scansDone.Add(1)
	info, err := handles.Of(wk.w).Mailbox.Info(ctx, jetstream.WithSubjectFilter(wire.MailboxFilter(wk.w.Name)))
	if err != nil {
		if ctx.Err() == nil {
			wk.log.Warn("scan of the mailboxes failed", "error", err)
		}
		return
	}
	var ids []string
	for subj, n := range info.State.Subjects {
		if n == 0 {
			continue
		}
		id, err := wire.MailboxID(wk.w.Name, subj)
		if err != nil || !wk.wants(id) {
			continue
		}
		// Another partition's ids are its first choice's: a claim from
		// here would mostly be told it is held. An id held here is
		// nudged whatever its partition (candidate): a post of it lost on
		// the way with none after it is found so.
		if wk.parts != nil && !wk.parts.serves(id) && wk.holding(id) == nil {
			continue
		}
		ids = append(ids, id)
	}
	keep, committed := wk.uncommitted(ctx, ids)
	for _, id := range keep {
		if wk.parts != nil && wk.parts.serves(id) {
			wk.parts.noteMail(id)
		}
		// The scan waits for room (the dispatcher never blocks): a scan
		// that dropped candidates would ask for another, and at 200,000
		// ids with mail each scan asked for the next.
		select {
		case cand <- candidate{id, fromScan}:
		case <-ctx.Done():
			return
		}
	}
	wk.purgeCommitted(ctx, committed)
}

// route hands sm, a post of id, to id's holding here and says true; with
// none, it calls keep (which may keep sm: kept.go) in the same step as the
// look, under mu, so that a claim takes what was kept with the holding
// entering the map, and says false. A holding that ended after it was
// found has left the map (holding.gone): it looks again.
func (wk *Worker) route(id string, sm *jetstream.RawStreamMsg, keep func()) bool {
	for {
		wk.mu.Lock()
		h := wk.held[id]
		if h == nil {
			keep()
		}
		wk.mu.Unlock()
		if h == nil {
			return false
		}
		if h.post(sm) {
			return true
		}
	}
}

// post puts a message from the feed in the holding's inbox, or, when the
// inbox is full, notes the gap (holding.dropped). It takes nothing from a
// holding that ended (false): the feed found it in the worker's map a
// moment before serve removed it, and the message is then the caller's to
// treat as one of an id nobody holds.
func (h *holding) post(m *jetstream.RawStreamMsg) bool {
	h.mu.Lock()
	if h.gone {
		h.mu.Unlock()
		return false
	}
	if h.inbox == nil {
		h.inbox = newInbox() // parked: park let it go
	}
	select {
	case h.inbox <- m:
		h.mu.Unlock()
		h.wake()
	default:
		h.mu.Unlock()
		h.drop(m.Sequence)
		h.full.Store(true)
		// The goroutine reads dropped after it takes messages from the
		// inbox (deliver). While some are still there it will; if it
		// took them all before the drop was noted, a nudge makes it
		// look. Only then: a nudge left over after it dealt with the drop
		// would be a drain of nothing.
		h.mu.Lock()
		empty := len(h.inbox) == 0
		h.mu.Unlock()
		if empty {
			nudge(h)
		} else {
			h.wake()
		}
	}
	return true
}

// gapUnknown in holding.dropped: messages may be missing that the worker
// cannot name; only a drain covers them.
const gapUnknown = math.MaxUint64

// drop notes that the inbox missed the message at seq (gapUnknown: some
// it cannot name).
func (h *holding) drop(seq uint64) {
	for {
		d := h.dropped.Load()
		if d >= seq || h.dropped.CompareAndSwap(d, seq) {
			return
		}
	}
}

func newInbox() chan *jetstream.RawStreamMsg { return make(chan *jetstream.RawStreamMsg, inboxSize) }

// gapAll marks every held id's inbox as missing messages.
func (wk *Worker) gapAll() {
	wk.mu.Lock()
	defer wk.mu.Unlock()
	wk.kept.reset() // what it kept may miss messages too
	for _, h := range wk.held {
		h.drop(gapUnknown)
		nudge(h)
	}
}
