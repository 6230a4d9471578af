package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/world"
)

// The call scenario: Producers callers call IDs ids round-robin, each one
// call at a time, against a world served by one in-process worker on a
// connection of its own whose handler answers with the body
// (client.World.Call: the post, the delivery, the commit, then the
// answer); and, in alternating rounds on the same server, the same
// callers make NATS requests (nats.Conn.Request) to one subscriber that
// answers with the body (raw request-reply: no storage, no ownership, no
// commit). It measures calls per second and the latency of each call
// from its start to its answer.
const ScenarioCall = "call"

func init() {
	Scenarios = append(Scenarios, ScenarioCall)
	ScenarioSizes[ScenarioCall] = map[string]Config{
		SizeSmoke: {IDs: 8, Producers: 8, Duration: 8 * time.Second, Rounds: 4, BodySize: 128, Window: 1, MaxBacklog: 1, Settle: 10 * time.Second, TTL: 5 * time.Second},
		SizeFull:  {IDs: 32, Producers: 32, Duration: 60 * time.Second, Rounds: 10, BodySize: 128, Window: 1, MaxBacklog: 1, Settle: 30 * time.Second, TTL: 5 * time.Second},
	}
}

// CallReport is the call scenario's outcome (Report.Calls).
type CallReport struct {
	Callers int        `json:"callers"` // calls in flight at a time, one per caller
	Ours    CallFigure `json:"fencepost"`
	Raw     CallFigure `json:"raw"`
	Ratio   float64    `json:"ratio"` // ours' calls/s over raw's
}

// CallFigure is one side's calls.
type CallFigure struct {
	Calls      int64   `json:"calls"`         // answered
	PerSecond  float64 `json:"calls_per_sec"` // answered, over the side's rounds
	Timeouts   int64   `json:"timeouts"`      // no answer within the call timeout
	Failed     int64   `json:"failed"`        // any other outcome
	LatencyP50 float64 `json:"latency_p50_ms"`
	LatencyP99 float64 `json:"latency_p99_ms"`
	LatencyMax float64 `json:"latency_max_ms"`
}

// callTimeout bounds one call of either side.
const callTimeout = 10 * time.Second

// callSide is one side of the call scenario.
type callSide struct {
	name    string
	call    func(ctx context.Context, id string, body []byte) error
	mu      sync.Mutex
	lat     []time.Duration
	busy    time.Duration // the side's rounds, added up
	timeout atomic.Int64
	failed  atomic.Int64
	firstEr atomic.Pointer[error]
}

// runCalls runs the call scenario on c's server (url: the same server,
// for the worker's and the responder's connections of their own).
func runCalls(ctx context.Context, c *client.Client, cfg Config, tag, url string) (Report, error) {
	rep := Report{Scenario: cfg.Scenario, Size: cfg.Size, IDs: cfg.IDs, Seconds: cfg.Duration.Seconds(), Rounds: cfg.Rounds, TTLms: cfg.TTL.Milliseconds(), Cluster: cfg.Cluster, Partitions: cfg.Partitions, Shards: cfg.Shards}
	if cfg.Replicas > 1 {
		rep.Replicas = cfg.Replicas
	}
	w, err := c.CreateWorld(ctx, tag, world.Config{Replicas: cfg.Replicas, Partitions: cfg.Partitions, Shards: cfg.Shards})
	if err != nil {
		return rep, fmt.Errorf("bench: create world: %w", err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = c.RemoveWorld(rctx, tag)
	}()

	// The worker and the raw responder: each on a connection of its own,
	// as another process's would be.
	wc, err := client.Connect(url, client.WithTimeout(30*time.Second), client.WithLogger(cfg.Log))
	if err != nil {
		return rep, err
	}
	defer wc.Close()
	ww, err := wc.World(ctx, tag)
	if err != nil {
		return rep, err
	}
	wk, err := ww.NewWorker(client.WorkerConfig{Node: "bench-call", TTL: cfg.TTL, Log: cfg.Log}, drain.CallHandler(func(_ context.Context, m drain.Message) ([]byte, error) {
		return m.Body, nil
	}).Handler())
	if err != nil {
		return rep, err
	}
	wctx, stopWorker := context.WithCancel(ctx)
	workerDone := make(chan error, 1)
	go func() { workerDone <- wk.Run(wctx) }()
	defer func() {
		stopWorker()
		<-workerDone
	}()
	subject := "bench." + tag + ".call"
	rc := wc.Conn()
	if _, err := rc.Subscribe(subject, func(m *nats.Msg) { _ = m.Respond(m.Data) }); err != nil {
		return rep, err
	}
	if err := rc.Flush(); err != nil {
		return rep, err
	}

	ids := make([]string, cfg.IDs)
	for i := range ids {
		ids[i] = fmt.Sprintf("id-%d", i)
	}
	body := make([]byte, cfg.BodySize)
	for i := range body {
		body[i] = 'a' + byte(i%26)
	}
	ours := &callSide{name: "fencepost", call: func(ctx context.Context, id string, body []byte) error {
		_, err := w.Call(ctx, id, body)
		return err
	}}
	raw := &callSide{name: "raw", call: func(ctx context.Context, _ string, body []byte) error {
		_, err := c.Conn().RequestWithContext(ctx, subject, body)
		return err
	}}
	// Warm-up: every id held by the worker (its first call waits for the
	// claim), and the raw path used once.
	var wg sync.WaitGroup
	warm := make([]error, len(ids))
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			defer cancel()
			warm[i] = ours.call(cctx, id, body)
		}()
	}
	wg.Wait()
	if err := errors.Join(warm...); err != nil {
		return rep, fmt.Errorf("bench: warm-up calls: %w", err)
	}
	if err := raw.call(ctx, "", body); err != nil {
		return rep, fmt.Errorf("bench: warm-up request: %w", err)
	}

	d := cfg.Duration / time.Duration(cfg.Rounds)
	sides := []*callSide{ours, raw}
	for i := range cfg.Rounds {
		for j, s := range sides {
			if err := s.run(ctx, cfg, ids, body, d, i, len(sides)*i+j, len(sides)*cfg.Rounds); err != nil {
				return rep, err
			}
		}
	}
	cr := &CallReport{Callers: cfg.Producers, Ours: ours.figure(), Raw: raw.figure()}
	if cr.Raw.PerSecond > 0 {
		cr.Ratio = round(cr.Ours.PerSecond/cr.Raw.PerSecond, 3)
	}
	rep.Calls = cr
	if e := ours.firstEr.Load(); e != nil && cr.Ours.Calls == 0 {
		return rep, fmt.Errorf("bench: no call was answered: %w", *e)
	}
	return rep, nil
}

// run runs cfg.Producers callers on s for one round of d.
func (s *callSide) run(ctx context.Context, cfg Config, ids []string, body []byte, d time.Duration, round, step, steps int) error {
	rctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	var answered atomic.Int64
	lat := make([][]time.Duration, cfg.Producers)
	for g := range cfg.Producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := g; rctx.Err() == nil; k += cfg.Producers {
				cctx, cancel := context.WithTimeout(ctx, callTimeout)
				t0 := time.Now()
				err := s.call(cctx, ids[k%len(ids)], body)
				cancel()
				switch {
				case err == nil:
					lat[g] = append(lat[g], time.Since(t0))
					answered.Add(1)
				case errors.Is(err, client.ErrCallTimeout), errors.Is(err, nats.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
					s.timeout.Add(1)
					s.firstEr.CompareAndSwap(nil, &err)
				default:
					s.failed.Add(1)
					s.firstEr.CompareAndSwap(nil, &err)
				}
			}
		}()
	}
	if cfg.Progress != nil {
		go func() {
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for {
				select {
				case <-rctx.Done():
					return
				case <-t.C:
					n := answered.Load()
					cfg.Progress(Progress{Side: s.name, Round: round + 1, Rounds: cfg.Rounds, Elapsed: time.Since(start), Duration: d, Sent: n, Delivered: n, Posting: true,
						Done: (float64(step) + min(time.Since(start).Seconds()/d.Seconds(), 1)) / float64(steps)})
				}
			}
		}()
	}
	wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	// A call still in flight when the round ended is counted: the
	// round's time runs until the last one returned.
	s.busy += time.Since(start)
	for _, l := range lat {
		s.lat = append(s.lat, l...)
	}
	return ctx.Err()
}

// figure sums s's rounds.
func (s *callSide) figure() CallFigure {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := CallFigure{Calls: int64(len(s.lat)), Timeouts: s.timeout.Load(), Failed: s.failed.Load()}
	if s.busy > 0 {
		f.PerSecond = round(float64(len(s.lat))/s.busy.Seconds(), 1)
	}
	if len(s.lat) == 0 {
		return f
	}
	slices.Sort(s.lat)
	q := func(p float64) float64 {
		i := min(int(p*float64(len(s.lat))), len(s.lat)-1)
		return round(float64(s.lat[i].Microseconds())/1000, 3)
	}
	f.LatencyP50, f.LatencyP99, f.LatencyMax = q(0.50), q(0.99), round(float64(s.lat[len(s.lat)-1].Microseconds())/1000, 3)
	return f
}
