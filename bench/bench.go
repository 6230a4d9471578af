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
//     drained by a pool of in-process workers.
//
// The two sides alternate in rounds on the same server. Safety is checked
// from the outside (see ledger): every commit the broker accepted is
// matched with the deliveries reported by the handlers, and after the run
// the parent drains whatever is left, so that "lost" means posted and never
// delivered.
package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/fencing"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/server"
	"github.com/fencepost/fencepost/worker"
	"github.com/fencepost/fencepost/world"
)

// Scenarios and sizes.
const (
	ScenarioSteady   = "steady"
	ScenarioTakeover = "takeover"
	ScenarioHandoff  = "handoff"
	ScenarioFanIn    = "fan-in"
	SizeSmoke        = "smoke"
	SizeFull         = "full"
)

// Scenarios lists the scenarios in the order of the documentation.
var Scenarios = []string{ScenarioSteady, ScenarioTakeover, ScenarioHandoff, ScenarioFanIn}

// Config is one run. Zero fields take the scenario's and size's defaults
// (see ScenarioSizes).
type Config struct {
	Scenario string // steady, takeover, handoff or fan-in
	Size     string // "smoke" or "full"; sets the zero fields below

	IDs       int           // mailboxes
	Producers int           // posting goroutines
	Duration  time.Duration // posting time of each side, over all rounds (not fan-in)
	// Rounds: the two sides alternate (ours, raw, ours, raw...) in this
	// many rounds of Duration/Rounds each, so that both see the same
	// machine state on a machine shared with other work. In fan-in a
	// round posts one message to every id (so Rounds is the messages per
	// id) and takes as long as it takes.
	Rounds   int
	BodySize int // bytes per message, at least 20
	Window   int // asynchronous sends in flight per producer
	// MaxBacklog bounds posted-but-undelivered messages, MaxBacklog/IDs per
	// id: producers skip an id above its share (and wait when every id is),
	// so that both sides run at their delivery capacity, the latency
	// measures delivery, not an ever-growing queue, and an id stalled by a
	// takeover does not stop the posts to the others. In fan-in the bound
	// is on the total.
	MaxBacklog int
	// Settle bounds the wait, after posting stops, for the last deliveries.
	Settle time.Duration
	TTL    time.Duration // the workers' node lease ttl

	// Takeover and handoff: Owners owner processes run OwnerExe (default:
	// this executable, which must call OwnerMain when IsOwnerProcess); a
	// fault every FaultEvery while ours posts, of the kinds in Faults in
	// turn (default kill, stop, seize; handoff: term).
	Owners     int
	FaultEvery time.Duration
	Faults     []string
	OwnerExe   string
	// Workers is the pool size of fan-in (in-process workers).
	Workers int

	// Progress, if set, is called about twice a second while a side runs.
	Progress func(Progress)
	// Log is the workers' logger (nil: a discarding one).
	Log *slog.Logger

	// Where to run: Client if set, else URL if set, else an embedded
	// server with its store in a temporary directory, removed at the end.
	// Owner processes connect to URL (or the Client's connected URL)
	// without credentials.
	Client *client.Client
	URL    string
}

// Progress is the state of a running side.
type Progress struct {
	Side          string // "fencepost" or "raw"
	Round, Rounds int    // this round (1-based) of how many
	Elapsed       time.Duration
	Duration      time.Duration // the posting time of the round (0 in fan-in)
	Sent          int64
	Delivered     int64
	Posting       bool    // the producers run (else: waiting for the last deliveries)
	Takeovers     int64   // faults injected so far
	Done          float64 // fraction of the whole run, 0..1 (an estimate)
}

// Sizes are the defaults of the steady scenario's sizes.
var Sizes = ScenarioSizes[ScenarioSteady]

// ScenarioSizes are the defaults of each scenario and size.
var ScenarioSizes = map[string]map[string]Config{
	ScenarioSteady: {
		SizeSmoke: {IDs: 8, Producers: 2, Duration: 8 * time.Second, Rounds: 4, BodySize: 128, Window: 128, MaxBacklog: 4000, Settle: 20 * time.Second, TTL: 5 * time.Second},
		SizeFull:  {IDs: 32, Producers: 4, Duration: 60 * time.Second, Rounds: 10, BodySize: 128, Window: 256, MaxBacklog: 8000, Settle: 60 * time.Second, TTL: 5 * time.Second},
	},
	ScenarioTakeover: {
		SizeSmoke: {IDs: 8, Producers: 2, Duration: 12 * time.Second, Rounds: 3, BodySize: 128, Window: 128, MaxBacklog: 4000, Settle: 20 * time.Second, TTL: time.Second, Owners: 3, FaultEvery: 2 * time.Second},
		SizeFull:  {IDs: 32, Producers: 4, Duration: 120 * time.Second, Rounds: 10, BodySize: 128, Window: 256, MaxBacklog: 8000, Settle: 60 * time.Second, TTL: time.Second, Owners: 4, FaultEvery: 2 * time.Second},
	},
	ScenarioHandoff: {
		SizeSmoke: {IDs: 8, Producers: 2, Duration: 12 * time.Second, Rounds: 3, BodySize: 128, Window: 128, MaxBacklog: 4000, Settle: 20 * time.Second, TTL: time.Second, Owners: 3, FaultEvery: 2 * time.Second},
		SizeFull:  {IDs: 32, Producers: 4, Duration: 120 * time.Second, Rounds: 10, BodySize: 128, Window: 256, MaxBacklog: 8000, Settle: 60 * time.Second, TTL: time.Second, Owners: 4, FaultEvery: 2 * time.Second},
	},
	ScenarioFanIn: {
		SizeSmoke: {IDs: 10000, Producers: 2, Rounds: 3, BodySize: 128, Window: 256, MaxBacklog: 20000, Settle: 60 * time.Second, TTL: 5 * time.Second, Workers: 4},
		SizeFull:  {IDs: 10000, Producers: 4, Rounds: 10, BodySize: 128, Window: 256, MaxBacklog: 20000, Settle: 120 * time.Second, TTL: 5 * time.Second, Workers: 4},
	},
}

// Report is the outcome of a run. The JSON names are a contract for
// machines (fencepost bench --json).
type Report struct {
	Scenario string  `json:"scenario"`
	Size     string  `json:"size"`
	IDs      int     `json:"ids"`
	Seconds  float64 `json:"duration_s"` // posting time of each side (fan-in: 0)
	Rounds   int     `json:"rounds"`     // alternations of the two sides
	Owners   int     `json:"owners,omitempty"`
	TTLms    int64   `json:"ttl_ms"`

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

	// Takeovers is the number of faults injected; the gaps run from each
	// fault to the first delivery of each of the victim's ids under a newer
	// epoch, over all kinds (0 when no takeover happened), and per kind in
	// TakeoverGaps.
	Takeovers      int                 `json:"takeovers"`
	TakeoverGapP50 float64             `json:"takeover_gap_p50_ms"`
	TakeoverGapP99 float64             `json:"takeover_gap_p99_ms"`
	TakeoverGapMax float64             `json:"takeover_gap_max_ms"`
	TakeoverGaps   map[string]GapStats `json:"takeover_gaps,omitempty"`
	Faults         []Fault             `json:"faults,omitempty"`
	// UnplannedExits counts owner processes that ended without a fault
	// (each was replaced); SelfFences in-process workers that self-fenced
	// (each was started again).
	UnplannedExits int64 `json:"unplanned_exits,omitempty"`
	SelfFences     int64 `json:"self_fences,omitempty"`

	DuplicatesPct float64 `json:"duplicates_pct"` // extra deliveries / distinct messages delivered, in %
	Lost          int64   `json:"lost"`           // sent but never delivered, even by the final drain: must be 0
	RawLost       int64   `json:"raw_lost"`
	// FinalDrained is how many messages the parent's final drain (after
	// the owners stopped) delivered: not lost, but not delivered in time.
	FinalDrained int64 `json:"final_drained"`
	// StaleCommits counts commits the broker accepted under an epoch that
	// had not delivered the messages they removed: must be 0.
	StaleCommits   int64 `json:"stale_commits"`
	CommitsChecked int64 `json:"commits_checked"`
	// StaleDeliveries counts handler calls that started after a newer
	// epoch of their id was stored (allowed: at-least-once; their commits
	// are refused). StaleChecked is how many deliveries were checked.
	StaleDeliveries int64    `json:"stale_deliveries"`
	StaleChecked    int64    `json:"stale_checked"`
	StaleExamples   []string `json:"stale_examples,omitempty"`
	// LedgerMissed counts bucket writes (records, cursors, locks) that were
	// overwritten more than 64 times before the checker read them: 0 means
	// every commit was checked against the record it was accepted under.
	LedgerMissed int64 `json:"ledger_missed"`
	// BucketWrites counts the writes to the world's bucket over the run
	// (claims, renewals, node leases, drain locks, cursor commits), and
	// BucketWritesPerMsg per delivery: the protocol's cost beside the
	// mailbox stream's, which the raw side does not pay.
	BucketWrites       int64   `json:"bucket_writes"`
	BucketWritesPerMsg float64 `json:"bucket_writes_per_msg"`

	// Timeline is per second of the run, for the chart.
	Timeline []Second `json:"-"`
}

// Second is one second of a run: deliveries and latency p99 of each side.
type Second struct {
	At           float64 // seconds since the start
	Delivered    int64
	P99          float64 // ms; 0 without deliveries
	RawDelivered int64
	RawP99       float64
}

// OK says whether the run kept its safety promises: nothing lost and no
// commit under a stale epoch.
func (r Report) OK() bool { return r.Lost == 0 && r.StaleCommits == 0 }

func (c Config) withDefaults() (Config, error) {
	if c.Scenario == "" {
		c.Scenario = ScenarioSteady
	}
	sizes, ok := ScenarioSizes[c.Scenario]
	if !ok {
		return c, fmt.Errorf("bench: scenario %q: use steady, takeover, handoff or fan-in", c.Scenario)
	}
	if c.Size == "" {
		c.Size = SizeSmoke
	}
	d, ok := sizes[c.Size]
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
	def(&c.Owners, d.Owners)
	def(&c.Workers, d.Workers)
	defD(&c.Duration, d.Duration)
	defD(&c.Settle, d.Settle)
	defD(&c.TTL, d.TTL)
	defD(&c.FaultEvery, d.FaultEvery)
	c.BodySize = max(c.BodySize, 20)
	if c.Scenario == ScenarioFanIn {
		c.Duration = 0
	}
	if c.Scenario == ScenarioTakeover || c.Scenario == ScenarioHandoff {
		for _, k := range c.Faults {
			if k != FaultKill && k != FaultStop && k != FaultSeize && k != FaultTerm {
				return c, fmt.Errorf("bench: fault %q: use kill, stop, seize or term", k)
			}
		}
		if c.OwnerExe == "" {
			exe, err := os.Executable()
			if err != nil {
				return c, fmt.Errorf("bench: the owner executable: %w", err)
			}
			c.OwnerExe = exe
		}
	}
	return c, nil
}

// Run runs cfg's scenario: fencepost and the raw baseline with the same
// load, in alternating rounds, on the same server. It creates a world and a
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
		}
		c, err = client.Connect(url, client.WithTimeout(30*time.Second), client.WithLogger(cfg.Log))
		if err != nil {
			return Report{}, err
		}
		defer c.Close()
	} else if url == "" {
		url = c.Conn().ConnectedUrl()
	}
	rep := Report{Scenario: cfg.Scenario, Size: cfg.Size, IDs: cfg.IDs, Seconds: cfg.Duration.Seconds(), Rounds: cfg.Rounds, TTLms: cfg.TTL.Milliseconds()}
	if cfg.Scenario == ScenarioTakeover || cfg.Scenario == ScenarioHandoff {
		rep.Owners = cfg.Owners
	}
	tag := fmt.Sprintf("bench-%d", time.Now().UnixNano())
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
	d := cfg.Duration / time.Duration(cfg.Rounds)
	steps := 2 * cfg.Rounds
	for i := range cfg.Rounds {
		for j, r := range []*runner{ours, raw} {
			r.s.step, r.s.steps = 2*i+j, steps
			if err := r.round(ctx, ids, i+1, d); err != nil {
				return rep, err
			}
		}
	}
	ours.halt()
	raw.close()
	if ours.final != nil {
		if err := ours.final(ctx, &rep); err != nil {
			return rep, err
		}
	}
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
	rep.Timeline = timeline(ours.s, raw.s)
	return rep, nil
}

// timeline merges the per-second figures of the two sides.
func timeline(ours, raw *side) []Second {
	ours.mu.Lock()
	defer ours.mu.Unlock()
	raw.mu.Lock()
	defer raw.mu.Unlock()
	n := max(len(ours.secs), len(raw.secs))
	out := make([]Second, n)
	ms := func(us int64) float64 { return round(float64(us)/1000, 3) }
	for i := range out {
		out[i].At = float64(i)
		if i < len(ours.secs) && ours.secs[i] != nil {
			out[i].Delivered = ours.secs[i].n
			out[i].P99 = ms(ours.secs[i].h.ValueAtQuantile(99))
		}
		if i < len(raw.secs) && raw.secs[i] != nil {
			out[i].RawDelivered = raw.secs[i].n
			out[i].RawP99 = ms(raw.secs[i].h.ValueAtQuantile(99))
		}
	}
	return out
}

// side is the bookkeeping of one side of a run (ours or raw).
type side struct {
	name  string
	cfg   Config
	start time.Time // of the run: the timeline's origin

	step, steps          int           // this round of both sides, of how many (progress)
	roundStart           time.Time     // of the current round
	round                int           // the current round, 1-based
	postTime, activeTime time.Duration // sums over the rounds: posting; first post to last delivery
	lastDelivery         atomic.Int64  // unix nanos
	posting              atomic.Bool
	takeovers            func() int64 // faults so far, or nil

	sent, delivered int64 // final figures
	nSent           atomic.Int64
	nDelivered      atomic.Int64
	distinct        atomic.Int64 // messages delivered at least once
	nextMsg         atomic.Uint64

	ids   map[string]int // id -> index
	perID []idCounts

	mu     sync.Mutex
	hist   *hdrhistogram.Histogram // microseconds
	count  []int32                 // deliveries per message number
	posted []bool                  // message numbers the stream acknowledged
	secs   []*second               // per second since start
}

// idCounts are one id's messages sent (counted when sent, not when
// acknowledged) and delivered at least once.
type idCounts struct{ sent, delivered atomic.Int64 }

type second struct {
	n int64
	h *hdrhistogram.Histogram // microseconds, 2 significant digits
}

func newSide(name string, cfg Config, start time.Time, ids []string) *side {
	s := &side{
		name:  name,
		cfg:   cfg,
		start: start,
		hist:  hdrhistogram.New(1, int64(10*time.Minute/time.Microsecond), 3),
		ids:   make(map[string]int, len(ids)),
		perID: make([]idCounts, len(ids)),
	}
	for i, id := range ids {
		s.ids[id] = i
	}
	return s
}

// body builds a message to the id at index idx: its number, the send
// time, the index, padding.
func (s *side) body(idx int) ([]byte, uint64) {
	n := s.nextMsg.Add(1)
	b := make([]byte, s.cfg.BodySize)
	binary.BigEndian.PutUint64(b[0:8], n)
	binary.BigEndian.PutUint64(b[8:16], uint64(time.Now().UnixNano()))
	binary.BigEndian.PutUint32(b[16:20], uint32(idx))
	return b, n
}

// deliver records one successful delivery of body, now.
func (s *side) deliver(body []byte) {
	if len(body) < 20 {
		return
	}
	s.deliverAt(int(binary.BigEndian.Uint32(body[16:20])), binary.BigEndian.Uint64(body[0:8]), int64(binary.BigEndian.Uint64(body[8:16])), time.Now().UnixNano())
}

// deliverAt records a delivery of message n to the id at index idx, sent
// at sent, handled at at (unix nanos). It says whether it was the
// message's first delivery.
func (s *side) deliverAt(idx int, n uint64, sent, at int64) bool {
	if n == 0 {
		return false // a warm-up message
	}
	lat := max(max(at-sent, 0)/int64(time.Microsecond), 1)
	sec := max(int((at-s.start.UnixNano())/int64(time.Second)), 0)
	s.mu.Lock()
	_ = s.hist.RecordValue(lat)
	if n >= uint64(len(s.count)) {
		s.count = grow(s.count, n)
	}
	s.count[n]++
	first := s.count[n] == 1
	for sec >= len(s.secs) {
		s.secs = append(s.secs, nil)
	}
	b := s.secs[sec]
	if b == nil {
		b = &second{h: hdrhistogram.New(1, int64(10*time.Minute/time.Microsecond), 2)}
		s.secs[sec] = b
	}
	b.n++
	_ = b.h.RecordValue(lat)
	s.mu.Unlock()
	s.nDelivered.Add(1)
	if first {
		s.distinct.Add(1)
		if idx >= 0 && idx < len(s.perID) {
			s.perID[idx].delivered.Add(1)
		}
	}
	if at > s.lastDelivery.Load() {
		s.lastDelivery.Store(at)
	}
	return first
}

func grow[T any](v []T, n uint64) []T {
	g := make([]T, max(2*len(v), int(n)+1, 1024))
	copy(g, v)
	return g
}

func (s *side) markPosted(n uint64) {
	s.mu.Lock()
	if n >= uint64(len(s.posted)) {
		s.posted = grow(s.posted, n)
	}
	s.posted[n] = true
	s.mu.Unlock()
	s.nSent.Add(1)
}

func (s *side) backlog() int64 { return s.nSent.Load() - s.nDelivered.Load() }

func (s *side) idBacklog(i int) int64 { return s.perID[i].sent.Load() - s.perID[i].delivered.Load() }

// produce posts until the posting time d ends, or in fan-in (d == 0) one
// message to every id, in an order shuffled per round.
func (s *side) produce(ctx context.Context, ids []string, send sender, d time.Duration) error {
	deadline := s.roundStart.Add(d)
	order := make([]int, len(ids))
	for i := range order {
		order[i] = i
	}
	if d == 0 {
		rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	}
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
			more := func() bool {
				if d == 0 {
					return k < len(order)
				}
				return time.Now().Before(deadline)
			}
			perID := int64(max(s.cfg.MaxBacklog/len(ids), 1))
			// next is the index of the next id to post to, or -1 when
			// every id is at its backlog share.
			next := func() int {
				if d == 0 {
					i := order[k]
					k += s.cfg.Producers
					return i
				}
				for range len(order) {
					i := order[k%len(order)]
					k++
					if s.idBacklog(i) < perID {
						return i
					}
				}
				return -1
			}
			for more() && ctx.Err() == nil {
				if d == 0 && s.backlog() > int64(s.cfg.MaxBacklog) {
					time.Sleep(200 * time.Microsecond)
					continue
				}
				fl = fl[:0]
				for range s.cfg.Window {
					if d == 0 && k >= len(order) {
						break
					}
					i := next()
					if i < 0 {
						break
					}
					b, n := s.body(i)
					s.perID[i].sent.Add(1)
					wait, err := send(ids[i], b)
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
					s.markPosted(f.n)
				}
				if len(fl) == 0 {
					time.Sleep(200 * time.Microsecond)
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

// settle waits until every posted message was delivered or Settle passed.
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
	if s.distinct.Load() < s.nSent.Load() {
		return false
	}
	return s.lost() == 0
}

// report calls the progress callback every 500 ms until stop is closed.
func (s *side) report(stop <-chan struct{}, d time.Duration, ids int) {
	if s.cfg.Progress == nil {
		return
	}
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	sent0 := s.nSent.Load()
	for {
		p := Progress{Side: s.name, Round: s.round, Rounds: s.cfg.Rounds, Elapsed: time.Since(s.roundStart), Duration: d, Sent: s.nSent.Load(), Delivered: s.nDelivered.Load(), Posting: s.posting.Load()}
		if s.takeovers != nil {
			p.Takeovers = s.takeovers()
		}
		frac := 0.0
		if d > 0 {
			frac = min(p.Elapsed.Seconds()/d.Seconds(), 1)
		} else if ids > 0 {
			frac = min(float64(p.Sent-sent0)/float64(ids), 1)
		}
		if s.steps > 0 {
			p.Done = (float64(s.step) + frac) / float64(s.steps)
		}
		s.cfg.Progress(p)
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
	for m, p := range s.posted {
		if p && (m >= len(s.count) || s.count[m] == 0) {
			n++
		}
	}
	return n
}

// sender posts one message and returns a wait for its acknowledgement.
type sender func(id string, body []byte) (func() error, error)

// runner is one side, set up and ready to run rounds.
type runner struct {
	s      *side
	send   sender
	errs   chan error                                                  // from the consuming side
	during func(ctx context.Context, start time.Time, d time.Duration) // runs beside each round's posting, or nil
	stop   func()                                                      // stops the consuming side and waits for it; idempotent
	final  func(ctx context.Context, rep *Report) error                // after stop: the final drain and the checks
	clean  []func()                                                    // removes what the side created, last first
	once   sync.Once
	halted sync.Once
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
	s.posting.Store(true)
	err := s.produce(ctx, ids, r.send, d)
	s.posting.Store(false)
	faults.Wait()
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
	w, err := c.CreateWorld(ctx, tag, world.Config{MaxMsgSize: 4096, MinTTL: min(cfg.TTL, time.Second)})
	if err != nil {
		return nil, fmt.Errorf("bench: create world: %w", err)
	}
	r.clean = append(r.clean, removeWith(func(ctx context.Context) error { return c.RemoveWorld(ctx, tag) }))
	led := newLedger(tag)
	lctx, stopLedger := context.WithCancel(context.WithoutCancel(ctx))
	r.clean = append(r.clean, stopLedger)
	if err := led.follow(lctx, w.World); err != nil {
		return nil, err
	}

	var ps *procSet
	var selfFences atomic.Int64
	switch cfg.Scenario {
	case ScenarioTakeover, ScenarioHandoff:
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
		// until an owner holds every id.
		if err := warmUp(ctx, w, ids, func() bool {
			recs := led.holders()
			for _, id := range ids {
				if !recs[id].held {
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
	r.send = func(id string, body []byte) (func() error, error) {
		p, err := w.Queue.SendAsync(id, body)
		if err != nil {
			return nil, err
		}
		return func() error { _, err := p.Wait(ctx); return err }, nil
	}
	r.final = func(ctx context.Context, rep *Report) error {
		n, err := finalDrain(ctx, w, s, led, cfg.TTL)
		if err != nil {
			return err
		}
		rep.FinalDrained = n
		if err := led.caughtUp(ctx, w.World); err != nil {
			return fmt.Errorf("bench: the ledger did not catch up with the bucket stream: %w", err)
		}
		v, err := led.check()
		if err != nil {
			return err
		}
		rep.StaleCommits, rep.CommitsChecked = v.staleCommits, v.commits
		rep.StaleDeliveries, rep.StaleChecked = v.staleDeliveries, v.measuredDeliveries
		rep.StaleExamples = v.staleCommitExamples
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
	if cfg.Scenario == ScenarioFanIn {
		// Each worker of the pool is a node of its own, with a connection
		// of its own (as separate processes would have).
		for i := range cfg.Workers {
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
		wk, err := worker.New(sp.w, sp.cfg, handle(s, led))
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
				if wk, err = worker.New(sp.w, sp.cfg, handle(s, led)); err != nil {
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
	// every worker holds its id, so that the figures are of the steady
	// state, not of the first claims.
	return warmUp(ctx, w, ids, func() bool {
		for _, wk := range wks {
			if len(wk.Held()) != 1 {
				return false
			}
		}
		return true
	})
}

func warmUp(ctx context.Context, w *client.World, ids []string, ready func() bool) error {
	for _, id := range ids {
		if _, err := w.Queue.Send(ctx, id, make([]byte, 16)); err != nil {
			return fmt.Errorf("bench: warm-up send: %w", err)
		}
	}
	if err := pollUntil(ctx, 2*time.Minute, ready); err != nil {
		return errors.New("bench: the owners did not claim their ids within 2 minutes")
	}
	return nil
}

// finalDrain drains, as the node "bench-final", every mailbox that still
// holds messages once the owners stopped, and returns how many messages it
// delivered for the first time.
func finalDrain(ctx context.Context, w *client.World, s *side, led *ledger, ttl time.Duration) (int64, error) {
	const node = "bench-final"
	info, err := w.Mailbox.Info(ctx, jetstream.WithSubjectFilter(wire.MailboxFilter(w.Name)))
	if err != nil {
		return 0, fmt.Errorf("bench: final drain: %w", err)
	}
	prefix := "fp." + w.Name + ".mb."
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
	for subj, cnt := range info.State.Subjects {
		if cnt == 0 || len(subj) <= len(prefix) {
			continue
		}
		id, err := wire.DecodeID(subj[len(prefix):])
		if err != nil {
			continue
		}
		deadline := time.Now().Add(2*ttl + 35*time.Second)
		for {
			l, err := w.Ownership.Claim(ctx, id, node, ttl)
			if err == nil {
				_, err = w.Drainer.DrainLease(ctx, l, h)
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

// setupRaw is the baseline: a plain stream with one subject per id,
// producers using PublishAsync, and one pull consumer per subject fetching
// batches of up to 100 and acknowledging each batch once (AckAll on its
// last message). In fan-in, one pull consumer of every subject fetches
// batches of up to 1000 instead.
func setupRaw(ctx context.Context, c *client.Client, cfg Config, tag string, ids []string, start time.Time) (_ *runner, err error) {
	s := newSide("raw", cfg, start, ids)
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
	filters, batchSize := make([]string, len(ids)), 100
	for i, id := range ids {
		filters[i] = prefix + "." + id
	}
	if cfg.Scenario == ScenarioFanIn {
		filters, batchSize = []string{prefix + ".*"}, 1000
	}
	for _, filter := range filters {
		// InactiveThreshold: an ephemeral consumer is removed after 5 s
		// without a pull by default, which a stall of an overloaded machine
		// can reach; the stream's removal removes it at the end.
		cons, err := st.CreateConsumer(ctx, jetstream.ConsumerConfig{FilterSubject: filter, AckPolicy: jetstream.AckAllPolicy, MaxAckPending: -1, InactiveThreshold: time.Hour})
		if err != nil {
			return nil, fmt.Errorf("bench: raw consumer: %w", err)
		}
		wg.Go(func() {
			var failing time.Time // since when Fetch fails; zero: it works
			for cctx.Err() == nil {
				batch, err := cons.Fetch(batchSize, jetstream.FetchMaxWait(250*time.Millisecond))
				if err != nil {
					// A stalled server (an overloaded machine) may fail a
					// pull for a while: give up after 30 s.
					if failing.IsZero() {
						failing = time.Now()
					}
					if cctx.Err() != nil {
						return
					}
					if time.Since(failing) > 30*time.Second {
						r.errs <- err
						return
					}
					time.Sleep(100 * time.Millisecond)
					continue
				}
				failing = time.Time{}
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
