package shard

import (
	"context"
	"errors"
	"hash/fnv"
	"slices"
	"strconv"
	"time"

	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/ownership"
)

// The assignment of shards to nodes, with no operator step.
//
// Each shard has an order of the live nodes: rendezvous hashing of the
// shard and each node's name, highest first. The first node of a shard's
// order claims it when it is free; the node of rank r claims a shard still
// free r rebalance periods after it was seen free (a first choice that
// does not claim does not leave it unserved). A node holding a shard whose
// first choice is another live node hands it over: it hands out nothing
// more, lets the calls running end, commits, removes, releases; the first
// choice then claims it (it sees the release on its watch). A node that
// dies holds its shards until its node lease lapses; every watcher sees
// the lapse at the lease's published expiry and the shard's first choice
// among the nodes still live claims it then.
//
// Ownership is never decided here: every claim is the ownership store's
// conditional write, and at most one holder exists per shard whatever the
// assignment believes. The assignment only decides who tries.
type assigner struct {
	wk *Worker
	ss *ownership.Session
	n  int

	live     []string          // the live nodes, as last listed (sorted)
	needLive bool              // list them again before deciding
	free     map[int]time.Time // shards seen free, since when
	leases   map[int]*ownership.Lease
	handing  map[int]bool // shards being handed over
	ended    chan endedHolder
}

type endedHolder struct {
	q   int
	h   *holder
	err error
}

func newAssigner(wk *Worker, ss *ownership.Session) *assigner {
	return &assigner{
		wk: wk, ss: ss, n: wk.w.Config.Shards,
		free:    map[int]time.Time{},
		leases:  map[int]*ownership.Lease{},
		handing: map[int]bool{},
		ended:   make(chan endedHolder, wk.w.Config.Shards),
	}
}

// run assigns until ctx ends (nil) or rctx does (its cause).
func (a *assigner) run(ctx, rctx context.Context) error {
	events, err := a.wk.own.Watch(rctx, "")
	if err != nil {
		return err
	}
	if err := a.listLive(rctx); err != nil {
		return err
	}
	if err := a.readAll(rctx); err != nil {
		return err
	}
	tick := time.NewTicker(a.wk.cfg.Rebalance)
	defer tick.Stop()
	for {
		again := a.step(rctx)
		var now <-chan time.Time
		if again {
			now = time.After(0)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-rctx.Done():
			return context.Cause(rctx)
		case ev, ok := <-events:
			if !ok {
				return errors.New("shard: the ownership watch ended")
			}
			a.onEvent(ev)
		case e := <-a.ended:
			a.onEnded(rctx, e)
		case <-tick.C:
			a.needLive = true
		case <-now:
		}
	}
}

// listLive reads the live nodes (this one among them).
func (a *assigner) listLive(ctx context.Context) error {
	lctx, cancel := jsapi.WithTimeout(ctx)
	defer cancel()
	nodes, err := a.wk.own.LiveNodes(lctx)
	if err != nil {
		return err
	}
	if !slices.Contains(nodes, a.wk.cfg.Node) {
		nodes = append(nodes, a.wk.cfg.Node)
	}
	slices.Sort(nodes)
	a.live, a.needLive = nodes, false
	return nil
}

// readAll learns which shards are free at the start (the watch reports
// changes only).
func (a *assigner) readAll(ctx context.Context) error {
	for q := range a.n {
		rctx, cancel := jsapi.WithTimeout(ctx)
		st, err := a.wk.own.Owner(rctx, wire.ShardUnit(q))
		cancel()
		if err != nil {
			return err
		}
		if !st.Held {
			a.free[q] = time.Now()
		}
	}
	return nil
}

// onEvent follows the shards' records.
func (a *assigner) onEvent(ev ownership.Event) {
	q, ok := wire.UnitShard(ev.ID, a.n)
	if !ok {
		return
	}
	switch ev.Kind {
	case ownership.EventReleased, ownership.EventDeleted:
		if _, ok := a.free[q]; !ok {
			a.free[q] = time.Now()
		}
		if ev.Node != a.wk.cfg.Node {
			a.needLive = true // a node may have left
		}
	case ownership.EventLapsed:
		if _, ok := a.free[q]; !ok {
			a.free[q] = time.Now()
		}
		// A lapse is the node lease's (or the record's): that node is not
		// live, whatever the last listing said.
		if i, found := slices.BinarySearch(a.live, ev.Node); found && ev.Node != a.wk.cfg.Node {
			a.live = slices.Delete(a.live, i, i+1)
		}
	case ownership.EventClaimed, ownership.EventSeized:
		if l := a.leases[q]; l != nil && ev.Epoch < l.Epoch {
			return // an earlier claim, shown late
		}
		delete(a.free, q)
		if l := a.leases[q]; l != nil && ev.Epoch > l.Epoch {
			// Only a newer epoch: the watch may show this node's own
			// claim, or the claims before it, after the claim returned.
			// Taken from this node (a forced seize, or a lapse this node
			// missed): stop at once; its commits would be refused anyway.
			if h := a.wk.holding(q); h != nil {
				h.log.Warn("shard taken over", "event", "taken_over", "by", ev.Node, "epoch", ev.Epoch)
				h.cancel(errLost)
			}
		}
	}
}

// step claims the free shards this node should try now, and starts the
// handovers of held shards whose first choice is another live node. It
// says whether it left work for an immediate next step.
func (a *assigner) step(ctx context.Context) bool {
	if a.needLive {
		if err := a.listLive(ctx); err != nil {
			a.wk.log.Warn("listing the live nodes", "error", err)
		}
	}
	now := time.Now()
	claims := 0
	for q, since := range a.free {
		if a.leases[q] != nil {
			delete(a.free, q)
			continue
		}
		r := a.rank(q)
		if r > 0 && now.Sub(since) < time.Duration(r)*a.wk.cfg.Rebalance {
			continue
		}
		if claims == maxClaimsPerStep {
			return true
		}
		claims++
		a.claim(ctx, q)
	}
	for q := range a.leases {
		if a.handing[q] || a.rank(q) == 0 {
			continue
		}
		if h := a.wk.holding(q); h != nil {
			a.handing[q] = true
			h.log.Info("handing the shard over", "event", "handover", "to", a.first(q))
			h.stopDraining()
		}
	}
	return false
}

// maxClaimsPerStep bounds the claims of one step, so that events are read
// between them.
const maxClaimsPerStep = 32

// claim tries to take shard q and starts its holder.
func (a *assigner) claim(ctx context.Context, q int) {
	cctx, cancel := jsapi.WithTimeout(ctx)
	l, err := a.ss.Claim(cctx, wire.ShardUnit(q))
	cancel()
	var held *ownership.HeldError
	switch {
	case err == nil:
		delete(a.free, q)
		a.leases[q] = l
		h := a.wk.newHolder(q, l)
		a.wk.mu.Lock()
		a.wk.held[q] = h
		a.wk.mu.Unlock()
		a.wk.log.Info("shard claimed", "event", "claimed", "shard", q, "epoch", l.Epoch)
		go h.run()
		go func() {
			<-h.ended
			a.ended <- endedHolder{q: q, h: h, err: h.err}
		}()
	case errors.As(err, &held):
		// Its release or lapse will show on the watch; in case the watch
		// showed this lapse early (a renewal it had not seen yet), look
		// again once the lease it read would lapse.
		a.free[q] = held.Expires
	default:
		a.wk.log.Warn("claiming a shard", "shard", q, "error", err)
	}
}

// onEnded takes a holder's end: a handover releases the shard; a holder
// that failed releases it too, so that it is claimed afresh (by this node
// or another); a lost one is someone else's.
func (a *assigner) onEnded(ctx context.Context, e endedHolder) {
	l := a.leases[e.q]
	delete(a.leases, e.q)
	delete(a.handing, e.q)
	a.wk.mu.Lock()
	if a.wk.held[e.q] == e.h {
		delete(a.wk.held, e.q)
	}
	a.wk.mu.Unlock()
	switch {
	case errors.Is(e.err, errLost), ctx.Err() != nil:
		return
	case !errors.Is(e.err, errDrained):
		e.h.log.Warn("shard holder stopped; releasing the shard", "error", e.err)
	}
	rctx, cancel := jsapi.WithTimeout(ctx)
	defer cancel()
	if err := a.ss.ReleaseHeld(rctx, l); err != nil {
		e.h.log.Warn("releasing the shard", "error", err)
		return
	}
	e.h.log.Info("shard released", "event", "released")
	a.free[e.q] = time.Now()
}

// rank is this node's place in shard q's order of the live nodes (0:
// first).
func (a *assigner) rank(q int) int {
	mine := score(a.wk.cfg.Node, q)
	r := 0
	for _, n := range a.live {
		if n != a.wk.cfg.Node && score(n, q) > mine {
			r++
		}
	}
	return r
}

// first is shard q's first choice among the live nodes.
func (a *assigner) first(q int) string {
	best, node := uint64(0), ""
	for _, n := range a.live {
		if s := score(n, q); node == "" || s > best {
			best, node = s, n
		}
	}
	return node
}

// score is the rendezvous hash of a node and a shard.
func score(node string, q int) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(node))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(strconv.Itoa(q)))
	return mix(h.Sum64())
}

// mix spreads FNV's low bits (splitmix64's finalizer).
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// holding is the holder of shard q, or nil.
func (wk *Worker) holding(q int) *holder {
	wk.mu.Lock()
	defer wk.mu.Unlock()
	return wk.held[q]
}
