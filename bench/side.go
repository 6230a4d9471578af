package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

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
	stalls               *stallMeter  // leader kills' stalls (Config.KillLeaders), or nil

	sent, delivered int64         // final figures
	cpu             time.Duration // machine CPU time during the side's rounds (cost.go)
	ownersCPU       time.Duration // the owner processes' own CPU time, their whole lives (0: none)
	ownerProcs      int           // the GOMAXPROCS the owner processes said they ran with (0: none said)
	inMsgs          int64         // messages clients sent the server during them
	nSent           atomic.Int64
	nDelivered      atomic.Int64
	distinct        atomic.Int64 // messages delivered at least once
	nextMsg         atomic.Uint64

	ids   map[string]int // id -> index
	perID []idCounts

	mu     sync.Mutex
	hist   *hdrhistogram.Histogram // microseconds
	count  []int32                 // deliveries per message number
	first  []int64                 // by message number: its earliest handler start, unix nanos (0: none)
	posted []bool                  // message numbers the stream acknowledged
	seqs   []uint64                // by message number: its stream sequence (0: not known)
	idxs   []int32                 // by message number: its id's index
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
	if s.stalls != nil {
		s.stalls.saw(at)
	}
	lat := max(max(at-sent, 0)/int64(time.Microsecond), 1)
	sec := max(int((at-s.start.UnixNano())/int64(time.Second)), 0)
	s.mu.Lock()
	_ = s.hist.RecordValue(lat)
	if n >= uint64(len(s.count)) {
		s.count = grow(s.count, n)
		s.first = grow(s.first, n)
	}
	s.count[n]++
	if s.first[n] == 0 || at < s.first[n] {
		s.first[n] = at
	}
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

// markPosted records that the stream acknowledged message n, to the id at
// index idx, at stream sequence seq (0: not known).
func (s *side) markPosted(n uint64, idx int, seq uint64) {
	s.mu.Lock()
	if n >= uint64(len(s.posted)) {
		s.posted = grow(s.posted, n)
		s.seqs = grow(s.seqs, n)
		s.idxs = grow(s.idxs, n)
	}
	s.posted[n] = true
	s.seqs[n], s.idxs[n] = seq, int32(idx)
	s.mu.Unlock()
	s.nSent.Add(1)
}

// postedSeqs are the stream sequences of every acknowledged post.
func (s *side) postedSeqs() []uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []uint64
	for n, ok := range s.posted {
		if ok && s.seqs[n] != 0 {
			out = append(out, s.seqs[n])
		}
	}
	return out
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
	switch {
	case s.cfg.Scenario == ScenarioZipf:
		// The same ids are hot in every round and on both sides.
		rand.New(rand.NewPCG(1, 2)).Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	case d == 0:
		rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	}
	var wg sync.WaitGroup
	errs := make(chan error, s.cfg.Producers)
	for p := range s.cfg.Producers {
		wg.Go(func() {
			type inflight struct {
				n    uint64
				idx  int
				wait func() (uint64, error)
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
			var zipf *rand.Zipf
			if s.cfg.Scenario == ScenarioZipf {
				zipf = rand.NewZipf(rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(p))), zipfS, 1, uint64(len(ids)-1))
			}
			// next is the index of the next id to post to, or -1 when
			// every id is at its backlog share.
			next := func() int {
				if d == 0 {
					i := order[k]
					k += s.cfg.Producers
					return i
				}
				if zipf != nil {
					return order[zipf.Uint64()] // the rank's id: hot ids spread over the id space
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
				if (d == 0 || zipf != nil) && s.backlog() > int64(s.cfg.MaxBacklog) {
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
					fl = append(fl, inflight{n, i, wait})
				}
				for _, f := range fl {
					seq, err := f.wait()
					if err != nil {
						errs <- err
						return
					}
					s.markPosted(f.n, f.idx, seq)
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

// lostMsgs is up to limit of the messages lost (posted and never
// delivered), each with where it was stored, and how many were lost in
// all.
func (s *side) lostMsgs(limit int) (lost []lostMsg, n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for m, p := range s.posted {
		if p && (m >= len(s.count) || s.count[m] == 0) {
			if n++; len(lost) < limit {
				lost = append(lost, lostMsg{n: uint64(m), idx: int(s.idxs[m]), seq: s.seqs[m]})
			}
		}
	}
	return lost, n
}

// lostMsg is a message posted and never delivered: its number, its id's
// index and its stream sequence (0: not known).
type lostMsg struct {
	n, seq uint64
	idx    int
}

func (s *side) lost() int64 {
	_, n := s.lostMsgs(0)
	return n
}

// resending makes a sender for runs that kill stream leaders: a post is
// sent with a message id of its own (its number), and one whose
// acknowledgement is an error or does not come within 2 s (the leader was
// lost mid-publish, or there is none yet) is sent again with the same id
// at once, then every 100 ms for up to 30 s; the stream's duplicate window
// keeps one copy. post sends asynchronously; its wait waits for the acknowledgement
// until ctx ends.
func resending(ctx context.Context, post func(id string, body []byte, msgID string) (func(ctx context.Context) (uint64, error), error)) sender {
	return func(id string, body []byte) (func() (uint64, error), error) {
		msgID := "bench-" + strconv.FormatUint(binary.BigEndian.Uint64(body[0:8]), 10)
		// A post's 2 s run from when it was sent: the producer waits for a
		// window of posts in turn, and those lost together time out
		// together.
		wait := func(w func(context.Context) (uint64, error), sent time.Time) (uint64, error) {
			tctx, cancel := context.WithDeadline(ctx, sent.Add(2*time.Second))
			defer cancel()
			return w(tctx)
		}
		sent := time.Now()
		first, err := post(id, body, msgID)
		return func() (uint64, error) {
			var seq uint64
			if err == nil {
				seq, err = wait(first, sent)
			}
			for tries, deadline := 0, time.Now().Add(30*time.Second); err != nil && time.Now().Before(deadline); tries++ {
				if tries > 0 && !sleepUntil(ctx, time.Now().Add(100*time.Millisecond)) {
					return 0, ctx.Err()
				}
				var w func(context.Context) (uint64, error)
				sent = time.Now()
				if w, err = post(id, body, msgID); err == nil {
					seq, err = wait(w, sent)
				}
			}
			return seq, err
		}, nil
	}
}
