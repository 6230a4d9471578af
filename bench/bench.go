// Package bench is fencepost's benchmark harness: it runs a scenario
// against a NATS server, and the raw JetStream baseline (publish plus pull
// consume, no ownership) on the same server with the same load, and reports
// delivery throughput, end-to-end latency, duplicates, lost messages and
// stale-epoch commits.
//
// Only the steady scenario exists so far: producers post to N ids, and one
// worker per id (worker.Worker restricted to that id) drains it; no faults.
package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/server"
	"github.com/fencepost/fencepost/worker"
	"github.com/fencepost/fencepost/world"
)

// Scenarios and sizes.
const (
	ScenarioSteady = "steady"
	SizeSmoke      = "smoke"
	SizeFull       = "full"
)

// Config is one run. Zero fields take the size's defaults (see Sizes).
type Config struct {
	Scenario string // only "steady" so far
	Size     string // "smoke" or "full"; sets the zero fields below

	IDs       int           // mailboxes, one owner each
	Producers int           // posting goroutines
	Duration  time.Duration // posting time of each side, over all rounds
	// Rounds: the two sides alternate (ours, raw, ours, raw...) in this
	// many rounds of Duration/Rounds each, so that both see the same
	// machine state on a machine shared with other work.
	Rounds   int
	BodySize int // bytes per message, at least 16
	Window   int // asynchronous sends in flight per producer
	// MaxBacklog bounds posted-but-undelivered messages: producers wait
	// above it, so that both sides run at their delivery capacity and the
	// latency measures delivery, not an ever-growing queue.
	MaxBacklog int
	// Settle bounds the wait, after posting stops, for the last deliveries.
	Settle time.Duration
	TTL    time.Duration // the workers' node lease ttl

	// Progress, if set, is called about twice a second while a side runs.
	Progress func(Progress)
	// Log is the workers' logger (nil: a discarding one).
	Log *slog.Logger

	// Where to run: Client if set, else URL if set, else an embedded
	// server with its store in a temporary directory, removed at the end.
	Client *client.Client
	URL    string
}

// Progress is the state of a running side.
type Progress struct {
	Side          string // "fencepost" or "raw"
	Round, Rounds int    // this round (1-based) of how many
	Elapsed       time.Duration
	Duration      time.Duration // the posting time of the round
	Sent          int64
	Delivered     int64
}

// Sizes are the defaults of each size.
var Sizes = map[string]Config{
	SizeSmoke: {IDs: 8, Producers: 2, Duration: 8 * time.Second, Rounds: 4, BodySize: 128, Window: 128, MaxBacklog: 4000, Settle: 20 * time.Second, TTL: 5 * time.Second},
	SizeFull:  {IDs: 32, Producers: 4, Duration: 60 * time.Second, Rounds: 10, BodySize: 128, Window: 256, MaxBacklog: 8000, Settle: 60 * time.Second, TTL: 5 * time.Second},
}

// Report is the outcome of a run. The JSON names are a contract for
// machines (fencepost bench --json).
type Report struct {
	Scenario string  `json:"scenario"`
	Size     string  `json:"size"`
	IDs      int     `json:"ids"`
	Seconds  float64 `json:"duration_s"` // posting time of each side
	Rounds   int     `json:"rounds"`     // alternations of the two sides

	Sent           int64   `json:"sent"`            // posts acknowledged by the stream
	Delivered      int64   `json:"delivered"`       // handler calls that returned nil
	SendThroughput float64 `json:"send_throughput"` // msgs/s posted
	Throughput     float64 `json:"throughput"`      // msgs/s delivered

	RawSent           int64   `json:"raw_sent"`
	RawDelivered      int64   `json:"raw_delivered"`
	RawSendThroughput float64 `json:"raw_send_throughput"`
	RawThroughput     float64 `json:"raw_throughput"`
	Ratio             float64 `json:"ratio"` // throughput / raw_throughput

	LatencyP50  float64 `json:"latency_p50_ms"` // post (send call) to handler
	LatencyP99  float64 `json:"latency_p99_ms"`
	LatencyP999 float64 `json:"latency_p999_ms"`
	LatencyMax  float64 `json:"latency_max_ms"`

	RawLatencyP50  float64 `json:"raw_latency_p50_ms"`
	RawLatencyP99  float64 `json:"raw_latency_p99_ms"`
	RawLatencyP999 float64 `json:"raw_latency_p999_ms"`

	// Takeover gaps: 0 in steady (no takeover happens).
	TakeoverGapP50 float64 `json:"takeover_gap_p50_ms"`
	TakeoverGapP99 float64 `json:"takeover_gap_p99_ms"`
	TakeoverGapMax float64 `json:"takeover_gap_max_ms"`

	DuplicatesPct float64 `json:"duplicates_pct"` // extra deliveries / distinct messages delivered, in %
	Lost          int64   `json:"lost"`           // sent but never delivered: must be 0
	RawLost       int64   `json:"raw_lost"`
	StaleCommits  int64   `json:"stale_commits"` // must be 0
	// StaleChecked is how many deliveries were compared with the epoch the
	// ownership watch had seen for their id (the others came before the
	// watch reported the claim, and were not checked).
	StaleChecked int64 `json:"stale_checked"`
}

// OK says whether the run kept its safety promises: nothing lost and no
// delivery under a stale epoch.
func (r Report) OK() bool { return r.Lost == 0 && r.StaleCommits == 0 }

func (c Config) withDefaults() (Config, error) {
	if c.Scenario == "" {
		c.Scenario = ScenarioSteady
	}
	if c.Scenario != ScenarioSteady {
		return c, fmt.Errorf("bench: scenario %q: only %q is implemented", c.Scenario, ScenarioSteady)
	}
	if c.Size == "" {
		c.Size = SizeSmoke
	}
	d, ok := Sizes[c.Size]
	if !ok {
		return c, fmt.Errorf("bench: size %q: use smoke or full", c.Size)
	}
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defD := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.IDs, d.IDs)
	def(&c.Rounds, d.Rounds)
	def(&c.Producers, d.Producers)
	def(&c.BodySize, d.BodySize)
	def(&c.Window, d.Window)
	def(&c.MaxBacklog, d.MaxBacklog)
	defD(&c.Duration, d.Duration)
	defD(&c.Settle, d.Settle)
	defD(&c.TTL, d.TTL)
	c.BodySize = max(c.BodySize, 16)
	return c, nil
}

// Run runs cfg's scenario: fencepost first, then the raw baseline with the
// same load, on the same server. It creates a world and a stream of its own
// (named after the start time) and removes them at the end.
func Run(ctx context.Context, cfg Config) (Report, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return Report{}, err
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	c := cfg.Client
	if c == nil {
		url := cfg.URL
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
		}
		c, err = client.Connect(url, client.WithTimeout(30*time.Second), client.WithLogger(cfg.Log))
		if err != nil {
			return Report{}, err
		}
		defer c.Close()
	}
	rep := Report{Scenario: cfg.Scenario, Size: cfg.Size, IDs: cfg.IDs, Seconds: cfg.Duration.Seconds(), Rounds: cfg.Rounds}
	tag := fmt.Sprintf("bench-%d", time.Now().UnixNano())
	ids := make([]string, cfg.IDs)
	for i := range ids {
		ids[i] = fmt.Sprintf("id-%d", i)
	}

	ours, err := setupOurs(ctx, c, cfg, tag, ids)
	if err != nil {
		return rep, err
	}
	defer ours.close()
	raw, err := setupRaw(ctx, c, cfg, tag, ids)
	if err != nil {
		return rep, err
	}
	defer raw.close()
	d := cfg.Duration / time.Duration(cfg.Rounds)
	for i := range cfg.Rounds {
		for _, r := range []*runner{ours, raw} {
			if err := r.round(ctx, ids, i+1, d); err != nil {
				return rep, err
			}
		}
	}
	ours.close()
	raw.close()
	ours.s.finish()
	raw.s.finish()

	rep.Sent, rep.Delivered = ours.s.sent, ours.s.delivered
	rep.SendThroughput, rep.Throughput = ours.s.sendRate(), ours.s.deliverRate()
	rep.RawSent, rep.RawDelivered = raw.s.sent, raw.s.delivered
	rep.RawSendThroughput, rep.RawThroughput = raw.s.sendRate(), raw.s.deliverRate()
	if rep.RawThroughput > 0 {
		rep.Ratio = round(rep.Throughput/rep.RawThroughput, 3)
	}
	rep.LatencyP50, rep.LatencyP99, rep.LatencyP999, rep.LatencyMax = ours.s.percentiles()
	rep.RawLatencyP50, rep.RawLatencyP99, rep.RawLatencyP999, _ = raw.s.percentiles()
	rep.DuplicatesPct = ours.s.duplicatesPct()
	rep.Lost, rep.RawLost = ours.s.lost(), raw.s.lost()
	rep.StaleCommits, rep.StaleChecked = ours.s.stale.Load(), ours.s.checked.Load()
	return rep, nil
}

// side is the bookkeeping of one side of a run (ours or raw).
type side struct {
	name string
	cfg  Config

	roundStart           time.Time     // of the current round
	round                int           // the current round, 1-based
	postTime, activeTime time.Duration // sums over the rounds: posting; first post to last delivery
	lastDelivery         atomic.Int64  // unix nanos

	sent, delivered int64 // final figures
	nSent           atomic.Int64
	nDelivered      atomic.Int64
	nextMsg         atomic.Uint64

	mu      sync.Mutex
	hist    *hdrhistogram.Histogram // microseconds
	count   map[uint64]int32        // deliveries per message number
	posted  map[uint64]bool         // message numbers the stream acknowledged
	stale   atomic.Int64
	checked atomic.Int64 // deliveries compared with a watched epoch
	epochMu sync.Mutex
	epoch   map[string]uint64 // newest epoch the ownership watch saw per id
}

func newSide(name string, cfg Config) *side {
	return &side{
		name:   name,
		cfg:    cfg,
		hist:   hdrhistogram.New(1, int64(10*time.Minute/time.Microsecond), 3),
		count:  map[uint64]int32{},
		posted: map[uint64]bool{},
		epoch:  map[string]uint64{},
	}
}

// body builds a message: its number, the send time, padding.
func (s *side) body() ([]byte, uint64) {
	n := s.nextMsg.Add(1)
	b := make([]byte, s.cfg.BodySize)
	binary.BigEndian.PutUint64(b[0:8], n)
	binary.BigEndian.PutUint64(b[8:16], uint64(time.Now().UnixNano()))
	return b, n
}

// delivered records one successful delivery of body.
func (s *side) deliver(body []byte) {
	now := time.Now()
	if len(body) < 16 {
		return
	}
	n := binary.BigEndian.Uint64(body[0:8])
	if n == 0 {
		return // a warm-up message
	}
	sentAt := int64(binary.BigEndian.Uint64(body[8:16]))
	lat := max(now.UnixNano()-sentAt, 0) / int64(time.Microsecond)
	s.mu.Lock()
	_ = s.hist.RecordValue(max(lat, 1))
	s.count[n]++
	s.mu.Unlock()
	s.nDelivered.Add(1)
	s.lastDelivery.Store(now.UnixNano())
}

func (s *side) backlog() int64 { return s.nSent.Load() - s.nDelivered.Load() }

// produce posts until the posting time ends; send posts one message and
// returns a wait for its acknowledgement.
func (s *side) produce(ctx context.Context, ids []string, send sender, d time.Duration) error {
	deadline := s.roundStart.Add(d)
	var wg sync.WaitGroup
	errs := make(chan error, s.cfg.Producers)
	for p := range s.cfg.Producers {
		wg.Go(func() {
			type inflight struct {
				n    uint64
				wait func() error
			}
			fl := make([]inflight, 0, s.cfg.Window)
			k := p
			for time.Now().Before(deadline) && ctx.Err() == nil {
				if s.backlog() > int64(s.cfg.MaxBacklog) {
					time.Sleep(200 * time.Microsecond)
					continue
				}
				fl = fl[:0]
				for range s.cfg.Window {
					b, n := s.body()
					wait, err := send(ids[k%len(ids)], b)
					k++
					if err != nil {
						errs <- err
						return
					}
					fl = append(fl, inflight{n, wait})
				}
				for _, f := range fl {
					if err := f.wait(); err != nil {
						errs <- err
						return
					}
					s.mu.Lock()
					s.posted[f.n] = true
					s.mu.Unlock()
					s.nSent.Add(1)
				}
			}
		})
	}
	wg.Wait()
	s.postTime += time.Since(s.roundStart)
	select {
	case err := <-errs:
		return fmt.Errorf("bench: %s: send: %w", s.name, err)
	default:
		return nil
	}
}

// settle waits until every posted message was delivered or Settle passed,
// reporting progress all along.
func (s *side) settle(ctx context.Context) {
	deadline := time.Now().Add(s.cfg.Settle)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		if s.allDelivered() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *side) allDelivered() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for n := range s.posted {
		if s.count[n] == 0 {
			return false
		}
	}
	return true
}

// report calls the progress callback every 500 ms until stop is closed.
func (s *side) report(stop <-chan struct{}, d time.Duration) {
	if s.cfg.Progress == nil {
		return
	}
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		s.cfg.Progress(Progress{Side: s.name, Round: s.round, Rounds: s.cfg.Rounds, Elapsed: time.Since(s.roundStart), Duration: d, Sent: s.nSent.Load(), Delivered: s.nDelivered.Load()})
		select {
		case <-stop:
			return
		case <-t.C:
		}
	}
}

func (s *side) finish() {
	s.sent, s.delivered = s.nSent.Load(), s.nDelivered.Load()
}

func (s *side) sendRate() float64 {
	d := s.postTime.Seconds()
	if d <= 0 {
		return 0
	}
	return round(float64(s.sent)/d, 1)
}

// deliverRate is the deliveries per second from the first post to the
// last delivery of each round.
func (s *side) deliverRate() float64 {
	d := s.activeTime.Seconds()
	if d <= 0 {
		return 0
	}
	return round(float64(s.delivered)/d, 1)
}

func (s *side) percentiles() (p50, p99, p999, pmax float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ms := func(us int64) float64 { return round(float64(us)/1000, 3) }
	return ms(s.hist.ValueAtQuantile(50)), ms(s.hist.ValueAtQuantile(99)), ms(s.hist.ValueAtQuantile(99.9)), ms(s.hist.Max())
}

func (s *side) duplicatesPct() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var distinct, extra int64
	for _, c := range s.count {
		if c > 0 {
			distinct++
			extra += int64(c - 1)
		}
	}
	if distinct == 0 {
		return 0
	}
	return round(100*float64(extra)/float64(distinct), 4)
}

func (s *side) lost() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for m := range s.posted {
		if s.count[m] == 0 {
			n++
		}
	}
	return n
}

// checkEpoch counts a delivery whose fence is older than the newest epoch
// the ownership watch has seen for its id: a handler running for a holder
// that was already replaced (its commit would be stale).
func (s *side) checkEpoch(id string, epoch uint64) {
	s.epochMu.Lock()
	cur := s.epoch[id]
	s.epochMu.Unlock()
	if cur > 0 {
		s.checked.Add(1)
	}
	if epoch < cur {
		s.stale.Add(1)
	}
}

func (s *side) watchEpochs(ctx context.Context, own *ownership.Store) error {
	ch, err := own.Watch(ctx, "")
	if err != nil {
		return err
	}
	go func() {
		for ev := range ch {
			if ev.Epoch == 0 || ev.ID == "" {
				continue
			}
			s.epochMu.Lock()
			s.epoch[ev.ID] = max(s.epoch[ev.ID], ev.Epoch)
			s.epochMu.Unlock()
		}
	}()
	return nil
}

// sender posts one message and returns a wait for its acknowledgement.
type sender func(id string, body []byte) (func() error, error)

// runner is one side, set up and ready to run rounds.
type runner struct {
	s     *side
	send  sender
	errs  chan error // from the consuming side
	stop  func()     // stops the consuming side and waits for it; idempotent
	clean []func()   // removes what the side created, last first
	once  sync.Once
}

func (r *runner) close() {
	r.once.Do(func() {
		r.stop()
		for i := len(r.clean) - 1; i >= 0; i-- {
			r.clean[i]()
		}
	})
}

// round posts for d, then waits until everything posted was delivered (or
// Settle passed).
func (r *runner) round(ctx context.Context, ids []string, n int, d time.Duration) error {
	s := r.s
	s.round = n
	s.roundStart = time.Now()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { s.report(stop, d); close(done) }()
	err := s.produce(ctx, ids, r.send, d)
	if err == nil {
		s.settle(ctx)
	}
	close(stop)
	<-done
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

// setupOurs is the fencepost side: a world of its own, one worker per id,
// producers using SendAsync.
func setupOurs(ctx context.Context, c *client.Client, cfg Config, tag string, ids []string) (_ *runner, err error) {
	s := newSide("fencepost", cfg)
	r := &runner{s: s, errs: make(chan error, len(ids)), stop: func() {}}
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	w, err := c.CreateWorld(ctx, tag, world.Config{MaxMsgSize: 4096})
	if err != nil {
		return nil, fmt.Errorf("bench: create world: %w", err)
	}
	r.clean = append(r.clean, removeWith(func(ctx context.Context) error { return c.RemoveWorld(ctx, tag) }))
	wctx, cancelWatch := context.WithCancel(ctx)
	r.clean = append(r.clean, cancelWatch)
	if err := s.watchEpochs(wctx, w.Ownership); err != nil {
		return nil, fmt.Errorf("bench: ownership watch: %w", err)
	}

	handler := func(_ context.Context, m drain.Message) error {
		if len(m.Body) < 16 || binary.BigEndian.Uint64(m.Body) == 0 {
			return nil // a warm-up message
		}
		s.checkEpoch(m.ID, m.Fence.Epoch)
		s.deliver(m.Body)
		return nil
	}
	wkctx, stopWorkers := context.WithCancel(ctx)
	var wg sync.WaitGroup
	r.stop = func() { stopWorkers(); wg.Wait() }
	wks := make([]*worker.Worker, len(ids))
	for i, id := range ids {
		wk, err := worker.New(w, worker.Config{Node: fmt.Sprintf("node-%d", i), TTL: cfg.TTL, IDs: []string{id}, Idle: time.Hour, Log: cfg.Log}, handler)
		if err != nil {
			return nil, err
		}
		wks[i] = wk
		wg.Go(func() {
			if err := wk.Run(wkctx); err != nil {
				r.errs <- fmt.Errorf("worker: %w", err)
			}
		})
	}
	// Warm-up: one message per id (number 0, not counted), then wait until
	// every worker holds its id, so that the figures are of the steady
	// state, not of the first claims.
	for _, id := range ids {
		if _, err := w.Queue.Send(ctx, id, make([]byte, 16)); err != nil {
			return nil, fmt.Errorf("bench: warm-up send: %w", err)
		}
	}
	for i := 0; ; i++ {
		all := true
		for _, wk := range wks {
			all = all && len(wk.Held()) == 1
		}
		if all {
			break
		}
		if i > 3000 || ctx.Err() != nil {
			return nil, errors.New("bench: the workers did not claim their ids within 30 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	r.send = func(id string, body []byte) (func() error, error) {
		p, err := w.Queue.SendAsync(id, body)
		if err != nil {
			return nil, err
		}
		return func() error { _, err := p.Wait(ctx); return err }, nil
	}
	return r, nil
}

// setupRaw is the baseline: a plain stream with one subject per id,
// producers using PublishAsync, and one pull consumer per subject fetching
// batches of up to 100 and acknowledging each batch once (AckAll on its
// last message).
func setupRaw(ctx context.Context, c *client.Client, cfg Config, tag string, ids []string) (_ *runner, err error) {
	s := newSide("raw", cfg)
	r := &runner{s: s, errs: make(chan error, len(ids)), stop: func() {}}
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	js := c.JetStream()
	name := "RAW_" + tag[len("bench-"):]
	prefix := "fpbench.raw." + tag[len("bench-"):]
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{prefix + ".*"}})
	if err != nil {
		return nil, fmt.Errorf("bench: create raw stream: %w", err)
	}
	r.clean = append(r.clean, removeWith(func(ctx context.Context) error { return js.DeleteStream(ctx, name) }))
	cctx, stopConsumers := context.WithCancel(ctx)
	var wg sync.WaitGroup
	r.stop = func() { stopConsumers(); wg.Wait() }
	for _, id := range ids {
		cons, err := st.CreateConsumer(ctx, jetstream.ConsumerConfig{FilterSubject: prefix + "." + id, AckPolicy: jetstream.AckAllPolicy, MaxAckPending: -1})
		if err != nil {
			return nil, fmt.Errorf("bench: raw consumer: %w", err)
		}
		wg.Go(func() {
			for cctx.Err() == nil {
				batch, err := cons.Fetch(100, jetstream.FetchMaxWait(250*time.Millisecond))
				if err != nil {
					if cctx.Err() == nil {
						r.errs <- err
					}
					return
				}
				var last jetstream.Msg
				for m := range batch.Messages() {
					s.deliver(m.Data())
					last = m
				}
				if err := batch.Error(); err != nil && cctx.Err() == nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, context.DeadlineExceeded) {
					r.errs <- err
					return
				}
				if last != nil {
					_ = last.Ack()
				}
			}
		})
	}
	r.send = func(id string, body []byte) (func() error, error) {
		f, err := js.PublishAsync(prefix+"."+id, body)
		if err != nil {
			return nil, err
		}
		return func() error {
			select {
			case <-f.Ok():
				return nil
			case err := <-f.Err():
				return err
			case <-ctx.Done():
				return ctx.Err()
			}
		}, nil
	}
	return r, nil
}

func round(v float64, places int) float64 {
	p := 1.0
	for range places {
		p *= 10
	}
	return float64(int64(v*p+0.5)) / p
}
