package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/fencing"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/queue"
	"github.com/fencepost/fencepost/worker"
	"github.com/fencepost/fencepost/world"
)

// setupOurs is the fencepost side: a world of its own, the ledger that
// follows it, the owners of the scenario, producers using SendAsync.
func setupOurs(ctx context.Context, c *client.Client, cfg Config, tag string, ids []string, url string, start time.Time) (_ *runner, err error) {
	s := newSide("fencepost", cfg, start, ids)
	r := &runner{s: s, errs: make(chan error, len(ids)+16), stop: func() {}}
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	wcfg := world.Config{MaxMsgSize: 4096, MinTTL: min(cfg.TTL, time.Second), Replicas: cfg.Replicas, Partitions: cfg.Partitions, Shards: cfg.Shards}
	if cfg.auth != nil {
		wcfg.Purge = world.PurgeByServer // as fencepostd --auth creates its world: owners may not purge
	}
	w, err := c.CreateWorld(ctx, tag, wcfg)
	if err != nil {
		return nil, fmt.Errorf("bench: create world: %w", err)
	}
	r.streams = map[string]string{streamMailbox: wire.MailboxStream(tag), streamBucket: wire.BucketStream(tag)}
	// post is the world as the producers open it.
	post := w
	if cfg.auth != nil {
		// fencepostd's world: it goes with fencepostd's directory.
		cfg.auth.run()
		pc, pw, err := cfg.auth.producer(ctx, cfg.Log)
		if err != nil {
			return nil, err
		}
		r.clean = append(r.clean, pc.Close)
		post = pw
	} else {
		r.clean = append(r.clean, removeWith(func(ctx context.Context) error { return c.RemoveWorld(ctx, tag) }))
	}
	led := newShardLedger(tag, cfg.Shards)
	lctx, stopLedger := context.WithCancel(context.WithoutCancel(ctx))
	r.clean = append(r.clean, stopLedger)
	history := int64(ledgerHistory)
	if cfg.KillLeaders {
		history = clusterLedgerHistory
	}
	if err := led.follow(lctx, w.World, history); err != nil {
		return nil, err
	}

	var ps *procSet
	var selfFences atomic.Int64
	switch cfg.Scenario {
	case ScenarioTakeover, ScenarioHandoff, ScenarioZipf, ScenarioCounter:
		ps = newProcSet(cfg, s, led, w, url)
		r.stop = ps.stop
		s.takeovers = ps.nFaults.Load
		if err := ps.start(ctx); err != nil {
			return nil, err
		}
		r.during = ps.during
		go func() {
			for err := range ps.errs {
				r.errs <- err
			}
		}()
		// Warm-up: one message per id (number 0, not counted), then wait
		// until an owner holds every id (in a sharded world, every id's
		// shard). Not in zipf: claiming its ids as mail arrives is part of
		// the work there, as in fan-in.
		if cfg.Scenario == ScenarioZipf {
			break
		}
		if err := warmUp(ctx, post, ids, led.posted, func() bool {
			recs := led.holders()
			for _, id := range ids {
				if !recs[led.unit(id)].held {
					return false
				}
			}
			return true
		}); err != nil {
			return nil, err
		}
	default:
		if err := startWorkers(ctx, c, w, cfg, ids, s, led, r, &selfFences); err != nil {
			return nil, err
		}
	}
	r.send = func(id string, body []byte) (func() (uint64, error), error) {
		p, err := post.Queue.SendAsync(id, body)
		if err != nil {
			return nil, err
		}
		return func() (uint64, error) {
			a, err := p.Wait(ctx)
			if err == nil {
				led.posted(id, a.Seq)
			}
			return a.Seq, err
		}, nil
	}
	if cfg.KillLeaders {
		r.send = resending(ctx, func(id string, body []byte, msgID string) (func(context.Context) (uint64, error), error) {
			p, err := post.Queue.SendAsync(id, body, queue.WithMsgID(msgID))
			if err != nil {
				return nil, err
			}
			return func(ctx context.Context) (uint64, error) {
				a, err := p.Wait(ctx)
				if err == nil {
					led.posted(id, a.Seq)
				}
				return a.Seq, err
			}, nil
		})
	}
	r.lastRound = func(ctx context.Context, rep *Report) error {
		// What the removal has not caught up with, read while the workers
		// still run, before the other sides' last rounds give it time: one
		// read of the world's stored mailbox messages, the oldest first.
		filter := wire.MailboxFilter(tag)
		if cfg.Shards > 0 {
			filter = wire.ShardedMailboxFilter(tag)
		}
		b, err := jsapi.DirectGet(ctx, c.Conn(), wire.MailboxStream(tag), jsapi.GetRequest{Seq: 1, NextFor: filter, Batch: 1})
		if err != nil {
			return fmt.Errorf("bench: the mail still stored: %w", err)
		}
		if len(b.Msgs) == 0 {
			return nil
		}
		// A round ends when every post was delivered: what is stored is
		// delivered, committed or in a commit under way, but for a round
		// that ended by Settle with a backlog, not counted as committed.
		stored, waiting := b.Pending+1, uint64(max(s.backlog(), 0))
		rep.CommittedStored = stored - min(stored, waiting)
		if rep.CommittedStored > 0 && waiting == 0 {
			rep.CommittedStoredAgeMs = round(float64(time.Since(b.Msgs[0].Time).Microseconds())/1000, 1)
		}
		return nil
	}
	r.final = func(ctx context.Context, rep *Report) error {
		if ps != nil {
			s.ownersCPU = time.Duration(ps.cpu.Load()) // every owner exited: stop ran
			s.ownerProcs = int(ps.procsSeen.Load())
		}
		n, err := finalDrain(ctx, w, s, led, cfg.TTL, cfg.Scenario == ScenarioCounter)
		if err != nil {
			return err
		}
		rep.FinalDrained = n
		if cfg.Scenario == ScenarioCounter {
			if err := checkCounters(ctx, w, s, rep); err != nil {
				return err
			}
		}
		if err := led.caughtUp(ctx, w.World); err != nil {
			return fmt.Errorf("bench: the ledger did not catch up with the bucket stream: %w", err)
		}
		v, err := led.check()
		if err != nil {
			return err
		}
		if n := led.unrecordedPosts(s.postedSeqs()); n > 0 {
			return fmt.Errorf("bench: the ledger has no post for %d acknowledged message(s): its check of the shard commits would pass over them", n)
		}
		rep.StaleCommits, rep.CommitsChecked = v.staleCommits, v.commits
		rep.StaleDeliveries, rep.StaleChecked = v.staleDeliveries, v.measuredDeliveries
		rep.StaleExamples = v.staleCommitExamples
		lost, _ := s.lostMsgs(maxLostExamples)
		for _, m := range lost {
			rep.LostExamples = append(rep.LostExamples, led.explainLoss(ids[m.idx], m.n, m.seq)+stillStored(ctx, w, m.seq))
		}
		rep.SelfFences = selfFences.Load()
		rep.LedgerMissed = v.missed
		rep.BucketWrites = v.writes
		if v.measuredDeliveries > 0 {
			rep.BucketWritesPerMsg = round(float64(v.writes)/float64(v.measuredDeliveries), 3)
		}
		if ps != nil {
			gaps := ps.gapStats()
			all := gaps["all"]
			rep.Takeovers = all.Faults
			rep.TakeoverGapP50, rep.TakeoverGapP99, rep.TakeoverGapMax = all.P50, all.P99, all.Max
			delete(gaps, "all")
			rep.TakeoverGaps = gaps
			ps.mu.Lock()
			rep.Faults = append([]Fault(nil), ps.faults...)
			ps.mu.Unlock()
			rep.UnplannedExits = ps.unplanned.Load()
		}
		return nil
	}
	return r, nil
}

// handle is the handler of the in-process workers.
func handle(s *side, led *ledger) drain.Handler {
	return func(_ context.Context, m drain.Message) error {
		at := time.Now().UnixNano()
		var n uint64
		var sent int64
		if len(m.Body) >= 16 {
			n, sent = binary.BigEndian.Uint64(m.Body[0:8]), int64(binary.BigEndian.Uint64(m.Body[8:16]))
		}
		led.delivery(m.ID, m.Seq, m.Fence.Epoch, at, n != 0)
		s.deliverAt(s.ids[m.ID], n, sent, at)
		return nil
	}
}

// stillStored says whether the mailbox stream still stores the message at
// seq (a lost message that is: the final drain's reads did not find it).
func stillStored(ctx context.Context, w *client.World, seq uint64) string {
	if seq == 0 {
		return ""
	}
	m, err := handles.Of(w.World).Mailbox.GetMsg(ctx, seq)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return "; not stored any more"
	case err != nil:
		return fmt.Sprintf("; whether it is still stored is not known (%v)", err)
	}
	return fmt.Sprintf("; still stored, under %s: the final drain's reads did not find it", m.Subject)
}

// maxLostExamples bounds Report.LostExamples.
const maxLostExamples = 10

// startWorkers starts the in-process workers: one per id (steady), or a
// pool of cfg.Workers serving every id (fan-in).
func startWorkers(ctx context.Context, c *client.Client, w *client.World, cfg Config, ids []string, s *side, led *ledger, r *runner, selfFences *atomic.Int64) error {
	wkctx, stopWorkers := context.WithCancel(ctx)
	var wg sync.WaitGroup
	r.stop = func() { stopWorkers(); wg.Wait() }
	type spec struct {
		w   *client.World
		cfg worker.Config
	}
	var specs []spec
	if cfg.Scenario == ScenarioFanIn || cfg.Shards > 0 {
		// Each worker of the pool is a node of its own, with a connection
		// of its own (as separate processes would have). A sharded world's
		// workers serve shards, not a list of ids: steady gets a pool of
		// as many nodes as it has ids.
		nodes := cfg.Workers
		if cfg.Scenario != ScenarioFanIn {
			nodes = len(ids)
		}
		for i := range nodes {
			nc, err := c.Conn().Opts.Connect()
			if err != nil {
				return fmt.Errorf("bench: a pool worker's connection: %w", err)
			}
			ci, err := client.New(nc, client.WithTimeout(30*time.Second), client.WithLogger(cfg.Log))
			if err != nil {
				nc.Close()
				return err
			}
			r.clean = append(r.clean, ci.Close)
			wi, err := ci.World(ctx, w.Name)
			if err != nil {
				return err
			}
			specs = append(specs, spec{wi, worker.Config{Node: fmt.Sprintf("pool-%d", i), TTL: cfg.TTL, Idle: time.Hour, Log: cfg.Log}})
		}
	} else {
		for i, id := range ids {
			specs = append(specs, spec{w, worker.Config{Node: fmt.Sprintf("node-%d", i), TTL: cfg.TTL, IDs: []string{id}, Idle: time.Hour, Log: cfg.Log}})
		}
	}
	wks := make([]*worker.Worker, len(specs))
	for i, sp := range specs {
		wk, err := sp.w.NewWorker(sp.cfg, handle(s, led))
		if err != nil {
			return err
		}
		wks[i] = wk
	}
	for i, sp := range specs {
		wg.Go(func() {
			// A worker that self-fences (its node lease lapsed, e.g. on an
			// overloaded machine) is started again, as a supervisor would,
			// and counted.
			wk := wks[i]
			for {
				err := wk.Run(wkctx)
				if wkctx.Err() != nil {
					return
				}
				var cause fencing.Cause
				if !errors.As(err, &cause) {
					if err == nil {
						err = errors.New("stopped")
					}
					r.errs <- fmt.Errorf("worker %s: %w", sp.cfg.Node, err)
					return
				}
				selfFences.Add(1)
				cfg.Log.Warn("bench: a worker self-fenced; starting it again", "node", sp.cfg.Node, "cause", cause)
				if wk, err = sp.w.NewWorker(sp.cfg, handle(s, led)); err != nil {
					r.errs <- err
					return
				}
			}
		})
	}
	if cfg.Scenario == ScenarioFanIn {
		// Claiming the ids is part of fan-in's work: wait for the node
		// leases only.
		return pollUntil(ctx, 30*time.Second, func() bool {
			for _, wk := range wks {
				if wk.Session() == nil {
					return false
				}
			}
			return true
		})
	}
	// Warm-up: one message per id (number 0, not counted), then wait until
	// every worker holds its id (in a sharded world, until every id's
	// shard is held by one of the pool), so that the figures are of the
	// steady state, not of the first claims.
	if cfg.Shards > 0 {
		return warmUp(ctx, w, ids, led.posted, func() bool {
			held := map[string]bool{}
			for _, wk := range wks {
				for _, u := range wk.Held() {
					held[u] = true
				}
			}
			for _, id := range ids {
				if !held[led.unit(id)] {
					return false
				}
			}
			return true
		})
	}
	return warmUp(ctx, w, ids, led.posted, func() bool {
		for _, wk := range wks {
			if len(wk.Held()) != 1 {
				return false
			}
		}
		return true
	})
}

// warmUp posts one message (number 0) to every id, telling posted each
// one's sequence, and waits until ready.
func warmUp(ctx context.Context, w *client.World, ids []string, posted func(id string, seq uint64), ready func() bool) error {
	for _, id := range ids {
		p, err := w.Queue.Send(ctx, id, make([]byte, 16))
		if err != nil {
			return fmt.Errorf("bench: warm-up send: %w", err)
		}
		posted(id, p.Seq)
	}
	if err := pollUntil(ctx, 2*time.Minute, ready); err != nil {
		return errors.New("bench: the owners did not claim their ids within 2 minutes")
	}
	return nil
}

// finalDrain drains, as the node "bench-final", every mailbox that still
// holds messages once the owners stopped, and returns how many messages it
// delivered for the first time.
func finalDrain(ctx context.Context, w *client.World, s *side, led *ledger, ttl time.Duration, counter bool) (int64, error) {
	const node = "bench-final"
	var first int64
	h := func(_ context.Context, m drain.Message) error {
		at := time.Now().UnixNano()
		if len(m.Body) < 16 {
			return nil
		}
		n, sent := binary.BigEndian.Uint64(m.Body[0:8]), int64(binary.BigEndian.Uint64(m.Body[8:16]))
		led.delivery(m.ID, m.Seq, m.Fence.Epoch, at, n != 0)
		if s.deliverAt(s.ids[m.ID], n, sent, at) {
			first++
		}
		return nil
	}
	if w.Shards() > 0 {
		return first, finalDrainShards(ctx, w, node, ttl, counter, h)
	}
	ids, err := w.MailboxIDs(ctx)
	if err != nil {
		return 0, fmt.Errorf("bench: final drain: %w", err)
	}
	for id := range ids {
		// Committed messages not purged yet (the workers' sweep runs once
		// a second) are not left to deliver.
		if st, err := w.Mailboxes.Stat(ctx, id); err == nil && st.Depth == 0 {
			continue
		}
		deadline := time.Now().Add(2*ttl + 35*time.Second)
		for {
			l, err := w.Ownership.Claim(ctx, id, node, ttl)
			if err == nil {
				err = drainFinal(ctx, w, l, h, counter)
				_ = w.Ownership.Release(ctx, id, node)
				if err == nil {
					break
				}
			}
			retry := errors.Is(err, ownership.ErrHeld) || errors.Is(err, drain.ErrContended) || errors.Is(err, ownership.ErrFree) || errors.Is(err, ownership.ErrFenced)
			if !retry || time.Now().After(deadline) || ctx.Err() != nil {
				return first, fmt.Errorf("bench: final drain of %q: %w", id, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return first, nil
}

// finalDrainShards is the final drain of a sharded world: when mail is
// still waiting, a worker of its own (node) serves every shard, claiming
// each one as its last holder releases it or lets it lapse, until no
// mail waits.
func finalDrainShards(ctx context.Context, w *client.World, node string, ttl time.Duration, counter bool, h drain.Handler) error {
	waiting := func() (uint64, error) {
		st, err := w.Mailboxes.MailTotals(ctx)
		return st.Depth, err
	}
	depth, err := waiting()
	if err != nil || depth == 0 {
		return err
	}
	wcfg := worker.Config{Node: node, TTL: ttl, Idle: time.Hour}
	var wk *worker.Worker
	if counter {
		wk, err = w.NewStateWorker(wcfg, counting(h))
	} else {
		wk, err = w.NewWorker(wcfg, h)
	}
	if err != nil {
		return fmt.Errorf("bench: final drain: %w", err)
	}
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- wk.Run(wctx) }()
	var runErr error
	ended := false
	err = pollUntil(ctx, 2*ttl+35*time.Second, func() bool {
		select {
		case runErr = <-done:
			ended = true
			return true
		default:
		}
		var werr error
		depth, werr = waiting()
		return werr == nil && depth == 0
	})
	stop()
	switch {
	case ended:
		return fmt.Errorf("bench: final drain: the worker stopped with %d messages waiting: %v", depth, runErr)
	case err != nil:
		<-done
		return fmt.Errorf("bench: final drain: %d messages still waiting: %w", depth, err)
	}
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("bench: final drain: the worker stopped: %w", err)
	}
	return nil
}
