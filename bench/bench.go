// Package bench is fencepost's benchmark harness: it runs a scenario
// against a NATS server, and the raw JetStream baseline (publish plus pull
// consume, no ownership) on the same server with the same load, and reports
// delivery throughput, end-to-end latency, takeover gaps, duplicates, lost
// messages and stale-epoch commits.
//
// Scenarios:
//
//   - steady: producers post to N ids, one in-process worker per id, no
//     faults;
//   - takeover: the owners are separate processes (a worker.Worker each, see
//     OwnerMain); on a schedule one is killed (SIGKILL), paused past its ttl
//     (SIGSTOP, then SIGCONT: it wakes fenced), or has its ids force-seized
//     by another node; a standby process takes over;
//   - handoff: the same, with graceful stops (SIGTERM: every id released at
//     once) for a standby to pick up;
//   - fan-in: 10,000 ids with a few messages each (one per id per round),
//     drained by a pool of in-process workers;
//   - zipf: 100,000 ids, each message's id drawn from a Zipf distribution
//     (s = 1.1), owner processes as in takeover, one killed every 5 s.
//
// A third side, the peer (Config.Peer, by default where the run supports
// it), runs the same producers against orbit.go's partitioned consumer
// groups, the NATS user's choice for per-key order (pcgroups.go).
//
// The sides alternate in rounds on the same server. Safety is checked
// from the outside (see ledger): every commit the broker accepted is
// matched with the deliveries reported by the handlers, and after the run
// the parent drains whatever is left, so that "lost" means posted and never
// delivered.
package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/daemon"
	"github.com/fencepost/fencepost/server"
)

// Run runs cfg's scenario: fencepost, the raw baseline and the peer with
// the same load, in alternating rounds, on the same server. It creates a world and a
// stream of its own (named after the start time) and removes them at the
// end.
func Run(ctx context.Context, cfg Config) (Report, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return Report{}, err
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	c := cfg.Client
	url := cfg.URL
	meter := &costMeter{}
	tag := fmt.Sprintf("bench-%d", time.Now().UnixNano())
	if cfg.Auth {
		a, err := startAuth(tag, cfg.Log)
		if err != nil {
			return Report{}, err
		}
		defer a.close()
		cfg.auth, url, meter.inMsgs = a, a.url(), a.inMsgs
		if c, err = a.connect(a.roleCreds(daemon.RoleOperator), cfg.Log); err != nil {
			return Report{}, fmt.Errorf("bench: connect as the operator: %w", err)
		}
		defer c.Close()
	}
	var cl *cluster
	if cfg.Cluster != 0 {
		dir, err := os.MkdirTemp("", "fencepost-bench-")
		if err != nil {
			return Report{}, err
		}
		defer os.RemoveAll(dir)
		if cl, err = startCluster(dir, cfg.Cluster); err != nil {
			return Report{}, err
		}
		defer cl.stop()
		url, meter.inMsgs = cl.url(), cl.inMsgs
	}
	if c == nil {
		if url == "" {
			dir, err := os.MkdirTemp("", "fencepost-bench-")
			if err != nil {
				return Report{}, err
			}
			defer os.RemoveAll(dir)
			srv, err := server.Start(server.Config{StoreDir: dir, Port: -1})
			if err != nil {
				return Report{}, fmt.Errorf("bench: embedded server: %w", err)
			}
			defer srv.Stop()
			url = srv.ClientURL()
			meter.inMsgs = func() int64 {
				v, err := srv.Varz(nil)
				if err != nil {
					return 0
				}
				return v.InMsgs
			}
		}
		c, err = client.Connect(url, client.WithTimeout(30*time.Second), client.WithLogger(cfg.Log))
		if err != nil {
			return Report{}, err
		}
		defer c.Close()
	} else if url == "" {
		url = c.Conn().ConnectedUrl()
	}
	if cfg.Scenario == ScenarioCall {
		return runCalls(ctx, c, cfg, tag, url) // call.go
	}
	rep := Report{Scenario: cfg.Scenario, Size: cfg.Size, IDs: cfg.IDs, Seconds: cfg.Duration.Seconds(), Rounds: cfg.Rounds, TTLms: cfg.TTL.Milliseconds(), Auth: cfg.Auth, Cluster: cfg.Cluster, Partitions: cfg.Partitions, Shards: cfg.Shards}
	if cfg.Replicas > 1 {
		rep.Replicas = cfg.Replicas
	}
	if cfg.withOwners() {
		rep.Owners = cfg.Owners
	}
	ids := make([]string, cfg.IDs)
	for i := range ids {
		ids[i] = fmt.Sprintf("id-%d", i)
	}
	start := time.Now()

	ours, err := setupOurs(ctx, c, cfg, tag, ids, url, start)
	if err != nil {
		return rep, err
	}
	defer ours.close()
	raw, err := setupRaw(ctx, c, cfg, tag, ids, start)
	if err != nil {
		return rep, err
	}
	defer raw.close()
	ours.meter, raw.meter = meter, meter
	runners := []*runner{ours, raw}
	var peer *runner
	if cfg.Peer == PeerPcgroups {
		if peer, err = setupPcgroups(ctx, c, cfg, tag, ids, url, start); err != nil {
			return rep, err
		}
		defer peer.close()
		peer.meter = meter
		runners = append(runners, peer)
	}
	if cfg.KillLeaders {
		ours.killLeaders(c, cl, []string{streamMailbox, streamBucket})
		raw.killLeaders(c, cl, []string{streamRaw, streamRaw})
	}
	d := cfg.Duration / time.Duration(cfg.Rounds)
	steps := len(runners) * cfg.Rounds
	for i := range cfg.Rounds {
		for j, r := range runners {
			r.s.step, r.s.steps = len(runners)*i+j, steps
			if err := r.round(ctx, ids, i+1, d); err != nil {
				return rep, err
			}
			if i == cfg.Rounds-1 && r.lastRound != nil {
				if err := r.lastRound(ctx, &rep); err != nil {
					return rep, err
				}
			}
		}
	}
	ours.halt()
	raw.close()
	var peerSide *side
	if peer != nil {
		peer.halt()
		peerSide = peer.s
	}
	for _, r := range []*runner{ours, peer} {
		if r != nil && r.final != nil {
			if err := r.final(ctx, &rep); err != nil {
				return rep, err
			}
		}
	}
	for _, r := range runners {
		r.s.finish()
	}

	rep.Sent, rep.Delivered = ours.s.sent, ours.s.delivered
	rep.SendThroughput, rep.Throughput = ours.s.sendRate(), ours.s.deliverRate()
	if rep.SendThroughput > 0 {
		rep.CommittedStoredPostMs = round(float64(rep.CommittedStored)/rep.SendThroughput*1000, 1)
	}
	rep.RawSent, rep.RawDelivered = raw.s.sent, raw.s.delivered
	rep.RawSendThroughput, rep.RawThroughput = raw.s.sendRate(), raw.s.deliverRate()
	if rep.RawThroughput > 0 {
		rep.Ratio = round(rep.Throughput/rep.RawThroughput, 3)
	}
	rep.LatencyP50, rep.LatencyP99, rep.LatencyP999, rep.LatencyMax = ours.s.percentiles()
	rep.RawLatencyP50, rep.RawLatencyP99, rep.RawLatencyP999, _ = raw.s.percentiles()
	rep.CPUPerMsgUs, rep.RequestsPerMsg = ours.s.costPerMsg()
	rep.RawCPUPerMsgUs, rep.RawRequestsPerMsg = raw.s.costPerMsg()
	rep.OwnersCPUPerMsgUs = ours.s.ownersCPUPerMsg()
	rep.OwnerGOMAXPROCS = ours.s.ownerProcs
	rep.DuplicatesPct = ours.s.duplicatesPct()
	rep.Lost, rep.RawLost = ours.s.lost(), raw.s.lost()
	oc, rc := ours.s.checkOrder(ids), raw.s.checkOrder(ids)
	rep.OrderChecked, rep.OrderViolations, rep.OrderExamples = oc.checked, oc.violations, oc.examples
	rep.RawOrderChecked, rep.RawOrderViolations = rc.checked, rc.violations
	if peer != nil {
		peerFigures(&rep, peer.s, ids)
	}
	rep.Timeline = timeline(ours.s, raw.s, peerSide)
	for _, r := range []*runner{ours, raw} {
		if r.s.stalls != nil {
			rep.LeaderKills = append(rep.LeaderKills, r.s.stalls.result()...)
		}
	}
	return rep, nil
}

// sender posts one message and returns a wait for its acknowledgement,
// which says the message's stream sequence (0 where the side does not
// know it).
type sender func(id string, body []byte) (func() (uint64, error), error)

// runner is one side, set up and ready to run rounds.
type runner struct {
	s      *side
	meter  *costMeter
	send   sender
	errs   chan error                                                  // from the consuming side
	during func(ctx context.Context, start time.Time, d time.Duration) // runs beside each round's posting, or nil
	stop   func()                                                      // stops the consuming side and waits for it; idempotent
	// streams names the side's streams by their role (streamMailbox,
	// streamBucket, streamRaw), for the leader kills.
	streams map[string]string
	// lastRound, when set, runs right after the side's last round, its
	// consumers still running.
	lastRound func(ctx context.Context, rep *Report) error
	final     func(ctx context.Context, rep *Report) error // after stop: the final drain and the checks
	clean     []func()                                     // removes what the side created, last first
	once      sync.Once
	halted    sync.Once
}

// halt stops the consuming side.
func (r *runner) halt() { r.halted.Do(r.stop) }

// close stops the consuming side and removes what the side created.
func (r *runner) close() {
	r.once.Do(func() {
		r.halt()
		for i := len(r.clean) - 1; i >= 0; i-- {
			r.clean[i]()
		}
	})
}

// round posts for d (fan-in: once to every id), then waits until
// everything posted was delivered (or Settle passed).
func (r *runner) round(ctx context.Context, ids []string, n int, d time.Duration) error {
	s := r.s
	s.round = n
	s.roundStart = time.Now()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { s.report(stop, d, len(ids)); close(done) }()
	var faults sync.WaitGroup
	if r.during != nil {
		fctx, cancel := context.WithCancel(ctx)
		defer cancel()
		faults.Go(func() { r.during(fctx, s.roundStart, d) })
	}
	before := r.meter.sample()
	s.posting.Store(true)
	err := s.produce(ctx, ids, r.send, d)
	s.posting.Store(false)
	faults.Wait()
	if err == nil {
		s.settle(ctx)
	}
	close(stop)
	<-done
	s.addCost(before, r.meter.sample())
	if last := time.Unix(0, s.lastDelivery.Load()); last.After(s.roundStart) {
		s.activeTime += last.Sub(s.roundStart)
	}
	if err != nil {
		return err
	}
	select {
	case err := <-r.errs:
		return fmt.Errorf("bench: %s: %w", s.name, err)
	default:
	}
	return ctx.Err()
}

func removeWith(f func(ctx context.Context) error) func() {
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = f(ctx)
	}
}
