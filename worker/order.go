package worker

import (
	"container/heap"
	"context"
	"errors"
	"hash/fnv"
	"slices"
	"sync"
	"time"

	"github.com/fencepost/fencepost/ownership"
)

// maxClaims bounds the claims a worker runs at once: each is a write to
// the bucket stream, where the node lease's renewals queue behind them
// (with 256 at once, workers facing 1,000 new ids self-fenced under -race
// on a loaded machine).
const maxClaims = 32

// dispatch handles candidates until ctx ends: a held id gets a nudge to
// drain again; another id is claimed after a delay that grows with the
// number of ids this worker holds (load spreading).
func (wk *Worker) dispatch(ctx context.Context, wg *sync.WaitGroup, ss *ownership.Session, cand chan candidate) {
	pending := map[string]bool{} // claims scheduled or running
	// others: ids another worker was seen holding, not tried again until
	// the watch reports them free (or, as a backstop, until the time set).
	others := map[string]time.Time{}
	// freed: pending ids the watch reported free (a release, a lapse)
	// since their claim was scheduled. A claim that found one held may
	// have read the record before that: it is tried again rather than
	// left to others (TestDispatch_FreedWhileClaiming).
	freed := map[string]bool{}
	// later: the claims scheduled (claimWait), earliest first, and one
	// timer for the earliest. Every id scheduled comes back: a bounded
	// channel fed by a timer per id dropped some when 100,000 ids came at
	// once, and such an id stayed pending here for good.
	var later laterClaims
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	type claimed struct {
		id   string
		held bool // another worker holds it
	}
	done := make(chan claimed, 256)
	// ready: claims due, waiting for one of the claim slots (running).
	// Claims run beside each other, at most wk.claimSlots at once: one at
	// a time, a worker facing thousands of new ids took a round trip per
	// id before it served any of them. The loop never waits for a slot,
	// so that candidates keep flowing: a loop blocked on one let the
	// candidate channel fill, and what it dropped waited for the next scan.
	var ready []string
	running := 0
	schedule := func(c candidate) {
		pending[c.id] = true
		if later.add(c.id, time.Now().Add(wk.claimWait(c.id, c.why == fromFree))) {
			timer.Reset(time.Until(later.next()))
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-done:
			running--
			delete(pending, r.id)
			again := freed[r.id]
			delete(freed, r.id)
			switch {
			case r.held && again:
				// Freed while it ran: its answer may be older than the
				// release.
				if c := (candidate{r.id, fromFree}); wk.candidate(c, pending, others) {
					schedule(c)
				}
			case r.held:
				others[r.id] = time.Now().Add(10 * wk.cfg.Scan)
			}
		case c := <-cand:
			switch {
			case c.why == fromFree && pending[c.id]:
				freed[c.id] = true
			case c.why == fromTaken:
				delete(freed, c.id) // taken again since: it is the taker's
			}
			if wk.candidate(c, pending, others) {
				schedule(c)
			}
			if wk.onCandidate != nil {
				wk.onCandidate(c.id, c.why == fromFree)
			}
		case <-timer.C:
			ready = append(ready, later.take())
			if later.Len() > 0 {
				timer.Reset(time.Until(later.next()))
			}
		}
		for len(ready) > 0 && running < wk.claimSlots {
			id := ready[0]
			ready = ready[1:]
			if until, ok := others[id]; ok && time.Now().Before(until) || wk.holding(id) != nil || !wk.unread(id) {
				delete(pending, id)
				delete(freed, id)
				continue
			}
			running++
			wg.Add(1)
			go func() {
				defer wg.Done()
				held := wk.claim(ctx, wg, ss, id)
				if wk.onClaimed != nil {
					wk.onClaimed(id, held)
				}
				select {
				case done <- claimed{id, held}:
				case <-ctx.Done():
				}
			}()
		}
	}
}

// candidate handles a candidate id: it says whether a claim of it is to
// be scheduled. A held id gets a nudge instead; an id another worker won,
// or was seen holding, is left to it.
func (wk *Worker) candidate(c candidate, pending map[string]bool, others map[string]time.Time) bool {
	id := c.id
	if c.why == fromTaken {
		// Another worker won it: a claim scheduled here would only read
		// the record to be told so.
		others[id] = time.Now().Add(10 * wk.cfg.Scan)
		return false
	}
	if h := wk.holding(id); h != nil {
		// A scan only nudges a held id that has not been drained for a
		// while: posts nudge it at once.
		if c.why != fromScan || time.Since(time.Unix(0, h.lastDone.Load())) >= wk.cfg.Scan {
			nudge(h)
		}
		return false
	}
	if c.why == fromFree {
		delete(others, id)
	}
	if !wk.unread(id) {
		return false
	}
	if until, ok := others[id]; ok && c.why != fromFree && time.Now().Before(until) {
		return false
	}
	return !pending[id]
}

// unread says whether id may have mail waiting: with a sweep, whether a
// message of it that the consumer read is not committed yet. An id with
// none is claimed when mail comes (its post is a candidate), not before:
// after a node dies its idle ids cost nothing, and a scan that finds
// committed messages not swept yet claims nothing. On a partitioned world,
// what the worker saw itself (parts.mail: posts, scans, its holding taken
// over, since the id was last taken). Without either (a worker of a list
// of ids, a world its server purges) every candidate may have.
func (wk *Worker) unread(id string) bool {
	switch {
	case wk.parts != nil:
		return wk.parts.hasMail(id)
	case wk.sweep != nil:
		return wk.sweep.Unread(id)
	}
	return true
}

// laterClaims is a min-heap of claims by due time.
type laterClaims []laterClaim

type laterClaim struct {
	at time.Time
	id string
}

func (l laterClaims) Len() int           { return len(l) }
func (l laterClaims) Less(i, j int) bool { return l[i].at.Before(l[j].at) }
func (l laterClaims) Swap(i, j int)      { l[i], l[j] = l[j], l[i] }
func (l *laterClaims) Push(x any)        { *l = append(*l, x.(laterClaim)) }
func (l *laterClaims) Pop() any {
	old := *l
	c := old[len(old)-1]
	*l = old[:len(old)-1]
	return c
}

// add schedules id's claim at `at`; it says whether that is now the
// earliest (the timer is to be set again).
func (l *laterClaims) add(id string, at time.Time) bool {
	heap.Push(l, laterClaim{at, id})
	return (*l)[0].id == id && (*l)[0].at.Equal(at)
}

// next is when the earliest claim is due (the heap is not empty).
func (l laterClaims) next() time.Time { return l[0].at }

// take removes the earliest claim and returns its id (the heap is not
// empty).
func (l *laterClaims) take() string { return heap.Pop(l).(laterClaim).id }

// claim takes id through the session and starts serving it; it says
// whether another worker holds id.
func (wk *Worker) claim(ctx context.Context, wg *sync.WaitGroup, ss *ownership.Session, id string) (heldByOther bool) {
	l, err := ss.Claim(ctx, id)
	if err != nil {
		if errors.Is(err, ownership.ErrHeld) {
			return true
		}
		if ctx.Err() == nil {
			wk.log.Warn("claim failed", "id", id, "error", err)
		}
		return false
	}
	hold := wk.dr.Hold
	if wk.cfg.State {
		hold = wk.dr.HoldState
	}
	drains, err := hold(l)
	if err != nil {
		wk.log.Warn("cannot drain a claimed id", "id", id, "error", err)
		return false
	}
	if wk.parts != nil {
		// Its posts reach this worker before its first drain reads.
		if err := wk.parts.hold(id); err != nil {
			wk.log.Warn("subscribe to a claimed id's posts; its deliveries are drains until a scan", "id", id, "error", err)
			wk.missed.Store(true)
		}
	}
	// What was kept of the id is every post of it since the first kept
	// unless a subscription to its partition here ended before hold made
	// sure that its posts reach this worker (kept.takeSince).
	var ends uint64
	if wk.parts != nil {
		ends = wk.parts.ended(id)
	}
	hctx, lost := context.WithCancelCause(ctx)
	h := &holding{lease: l, drains: drains, more: make(chan struct{}, 1), inbox: newInbox(), lost: lost}
	h.active.Store(time.Now().UnixNano())
	h.more <- struct{}{} // the first delivery
	wk.mu.Lock()
	h.start, h.whole = wk.kept.takeSince(id, ends)
	wk.held[id] = h
	many := len(wk.held) == shardHint && wk.ids == nil
	wk.startHolding(hctx, wg, ss, id, h)
	wk.mu.Unlock()
	wk.log.Info("claimed", "event", "claimed", "id", id, "epoch", l.Epoch)
	if many && wk.hinted.CompareAndSwap(false, true) {
		wk.log.Info("this worker holds many ids of a per-id world: a sharded world serves many small mailboxes several times faster (fencepost world add W --shards N; docs/design.md, Shards)", "event", "shard_hint", "held", shardHint)
	}
	return false
}

// shardHint is the number of ids held at once past which a worker of every
// id of a per-id world says, once, that a sharded world would serve it
// faster.
const shardHint = 1000

// claimFallback is how long, at least, a worker that is not a new id's
// first choice waits before it tries the id itself (the first choice may
// be gone, may not serve the id, or may not be listed here yet, or slow:
// its claims queue); the node lease ttl when longer.
const claimFallback = time.Second

// freedFallback is claimFallback for an id that was held (claimWait).
const freedFallback = 50 * time.Millisecond

// claimWait is how long the worker waits before it tries to claim a new
// id. Each id has its own order of the world's live nodes (rendezvous
// hashing: a hash of id and node): the first tries at once, the others
// after claimFallback and a delay that grows with the ids they hold, and
// the watch shows them the first one's claim, so that they never try.
// Ids spread evenly over the live nodes, and a new id costs one claim, not
// one per worker (under the fan-in bench 4 workers made 6 claims per id).
// Until the nodes were listed, the least loaded worker tries first.
//
// An id that was held and is free again (freed: a lapse, a release) is a
// takeover, whose gap users wait on: the others wait only freedFallback,
// at the cost of a race now and then (the first choice may be stopped, or
// killed and its node lease not lapsed yet; a node whose lease lapsed is
// dropped before its ids' lapses are handled).
func (wk *Worker) claimWait(id string, freed bool) time.Duration {
	if wk.claimWaitFor != nil {
		if d := wk.claimWaitFor(id); d > 0 {
			return d
		}
	}
	key := id
	if wk.parts != nil && wk.parts.listed == nil {
		key = partKey(wk.parts.partition(id))
	}
	load := min(time.Duration(wk.count())*wk.cfg.Spread, wk.cfg.MaxSpread) + rank(key, wk.cfg.Node, 10*wk.cfg.Spread)
	peers := wk.peers.Load()
	if peers == nil {
		return load
	}
	if wk.first(key, *peers) == wk.cfg.Node {
		return 0
	}
	if freed {
		return freedFallback + load
	}
	return max(claimFallback, wk.cfg.TTL) + load
}

// first is the node that tries key first: the highest score among the
// live nodes and this one (rendezvous hashing).
func (wk *Worker) first(key string, peers []string) string {
	first, best := wk.cfg.Node, score(key, wk.cfg.Node)
	for _, n := range peers {
		if sc := score(key, n); sc > best || sc == best && n < first {
			first, best = n, sc
		}
	}
	return first
}

// listPeers lists the live nodes again.
func (wk *Worker) listPeers(ctx context.Context) {
	nodes, err := wk.own.LiveNodes(ctx)
	if err != nil {
		if ctx.Err() == nil {
			wk.log.Debug("list of live nodes", "error", err)
		}
		return
	}
	slices.Sort(nodes)
	wk.peers.Store(&nodes)
	wk.reassign(ctx)
}

// dropPeer removes a node whose node lease lapsed from the live nodes, so
// that the ids it held are not left to it. It says whether the node was
// among them.
func (wk *Worker) dropPeer(node string) bool {
	for {
		old := wk.peers.Load()
		if old == nil || !slices.Contains(*old, node) {
			return false
		}
		next := slices.DeleteFunc(slices.Clone(*old), func(n string) bool { return n == node })
		if wk.peers.CompareAndSwap(old, &next) {
			return true
		}
	}
}

// rank is id's delay for node, in [0, span): a hash of both, so that the
// workers of a world try a new id in an order of their own for each id.
func rank(id, node string, span time.Duration) time.Duration {
	if span <= 0 {
		return 0
	}
	return time.Duration(score(id, node) % uint64(span))
}

// score is the rendezvous hash of id and node.
func score(id, node string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(id))
	h.Write([]byte{0})
	h.Write([]byte(node))
	x := h.Sum64() // FNV mixes its last bytes poorly into the low bits: finish it (splitmix64)
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
