package daemon

import (
	"io"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/server/servertest"
)

// replaySim writes one record key as owners would, through a watch that
// lags at random: a write is delivered to the auditor at once, or later,
// or never (the next write of the key replaced it first), and every write
// reaches the record feed. It judges each delivery as record does (the
// missed writes first, from the feed), and counts what it finds forged.
// No server stores the writes: the feed and the watch are the simulated
// parts; the auditor's judgement is the real one.
type replaySim struct {
	t       *testing.T
	rng     *rand.Rand
	a       *auditor
	f       *recordFeed
	key     string
	rev     uint64      // the bucket's last revision
	last    uint64      // the key's last write
	rec     wire.Record // the key's record as stored
	pending *entry      // stored, not delivered yet
	at      time.Time
}

func newReplaySim(t *testing.T, js jetstream.JetStream, seed uint64) *replaySim {
	start := time.Now()
	f := &recordFeed{w: "default", since: start, from: start, changed: make(chan struct{}), byRev: map[uint64]feedWrite{}}
	d := &Daemon{feed: f, cfg: Config{World: "default"}, log: slog.New(slog.NewTextHandler(io.Discard, nil)), stopCtx: t.Context()}
	counter := func(name string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name}, labels)
	}
	a := &auditor{d: d, js: js, maxTTL: time.Minute, watch: 1, marks: &epochMarks{m: map[string]epochMark{}},
		count: counter("forgeries", "world", "kind"), missed: counter("missed", "world", "known")}
	return &replaySim{t: t, rng: rand.New(rand.NewPCG(seed, 47)), a: a, f: f, key: wire.RecordKey("id"), rev: 100, at: start}
}

// store writes rec as the key's next write: other keys' writes may come
// between (revisions the auditor's mark counts as possible claims), the
// feed gets it, and the watch delivers it now or later, or misses it.
func (s *replaySim) store(rec wire.Record) {
	s.t.Helper()
	s.rev += 1 + uint64(s.rng.IntN(3))
	b, err := wire.EncodeRecord(rec)
	require.NoError(s.t, err)
	s.f.add(republished(s.key, s.rev, s.last, s.at, b))
	s.last, s.rec = s.rev, rec
	s.pending = &entry{key: s.key, value: b, rev: s.rev, created: s.at, op: jetstream.KeyValuePut, hdr: nats.Header{}}
	if s.rng.IntN(2) == 0 {
		s.deliver()
	}
}

// deliver hands the watch's pending write to the auditor, as record does;
// fencepostd's free of a forged one is the key's next write.
func (s *replaySim) deliver() {
	if s.pending == nil {
		return
	}
	e := s.pending
	s.pending = nil
	m := s.a.marks.m[e.key]
	m = s.a.replayMissed(m, e)
	v := s.a.judge(m, e, false, writer{}, false)
	s.a.seen++
	if v.kind == "" {
		v.next.at = e.rev
		s.a.marks.m[e.key] = v.next
		return
	}
	s.a.report(v.kind, e, nil)
	next := s.a.freed(m, e, v, true)
	next.at = e.rev
	s.a.marks.m[e.key] = next
	free := v.rec
	free.State, free.Epoch, free.Expires = wire.StateFree, v.epoch, s.at
	s.store(free)
}

// forged is how many writes the auditor found forged, missed or delivered.
func (s *replaySim) forged() float64 {
	n := 0.0
	for _, k := range []string{ForgedEpochBack, ForgedEpochJump, ForgedRecordTerm, ForgedRecordNode, ForgedRecordGone, ForgedRecordBad} {
		n += promtest.ToFloat64(s.a.count.WithLabelValues("default", k))
	}
	return n
}

func (s *replaySim) held(node string, epoch uint64) wire.Record {
	return wire.Record{Node: node, Epoch: epoch, State: wire.StateHeld, TTLms: 60_000, Acquired: s.at, Expires: s.at.Add(time.Minute)}
}

// honest makes one write an owner makes: a claim of a free record, or
// the holder's renewal or release, or another node's seize.
func (s *replaySim) honest() {
	nodes := []string{"node-a", "node-b", "node-c"}
	n := nodes[s.rng.IntN(len(nodes))]
	switch {
	case s.rec.Epoch == 0 || s.rec.State == wire.StateFree:
		s.store(s.held(n, s.rec.Epoch+1))
	case n != s.rec.Node:
		s.store(s.held(n, s.rec.Epoch+1)) // a seize (the holder's lease lapsed, or force)
	case s.rng.IntN(2) == 0:
		s.store(s.held(n, s.rec.Epoch)) // a renewal
	default:
		free := s.rec
		free.State, free.Expires = wire.StateFree, s.at
		s.store(free) // a release
	}
}

// TestReplay_RandomHistories: histories of claims, renewals, releases and
// seizes among three nodes, through a watch that misses about a third of
// the writes, are judged honest throughout. The same histories with, at a
// random point, the epoch of a holding given a second time (mallory's
// record at the holder's epoch written over it, then renewed up to twice)
// are detected, whichever of those writes the watch missed; with the feed
// empty (the auditor before it), some are not, so the histories do reach
// the race the feed closes. After the detection and fencepostd's free,
// the owners go on: nothing more is judged forged, and the epoch given
// twice is not given a third time.
func TestReplay_RandomHistories(t *testing.T) {
	srv := servertest.New(t)
	nc, err := nats.Connect(srv.ClientURL())
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)

	const histories = 400
	undetectedWithoutFeed := 0
	for seed := range uint64(histories) {
		s := newReplaySim(t, js, seed)
		for range 3 + s.rng.IntN(20) {
			s.honest()
		}
		s.deliver()
		require.Zero(t, s.forged(), "seed %d: an honest history judged forged", seed)
		require.Zero(t, promtest.ToFloat64(s.a.missed.WithLabelValues("default", "false")), "seed %d: a gap in a whole feed", seed)

		for _, feed := range []bool{true, false} {
			s := newReplaySim(t, js, seed)
			for range 3 + s.rng.IntN(20) {
				s.honest()
			}
			if s.rec.State != wire.StateHeld {
				s.honest() // now held (a claim)
			}
			if !feed {
				s.a.d.feed = nil
			}
			s.store(s.held("mallory", s.rec.Epoch))
			for range s.rng.IntN(3) {
				s.store(s.held("mallory", s.rec.Epoch))
			}
			given := s.rec.Epoch
			s.deliver()
			if !feed {
				if s.forged() == 0 {
					undetectedWithoutFeed++
				}
				continue
			}
			detected := s.forged()
			require.NotZero(t, detected, "seed %d: the epoch given twice was not detected", seed)
			// Freed; the owners go on, the watch missing what it may: no
			// honest write is judged forged, and no epoch is given again.
			for range 10 {
				s.honest()
				if s.rec.State == wire.StateHeld && s.rec.Node != "mallory" {
					require.Greater(t, s.rec.Epoch, given, "seed %d: epoch %d given again", seed, given)
				}
			}
			s.deliver()
			require.Equal(t, detected, s.forged(), "seed %d: an honest write after the free judged forged", seed)
		}
	}
	require.NotZero(t, undetectedWithoutFeed, "without the feed every attack was detected: the histories never meet the race")
	t.Logf("%d of %d attacks undetected without the feed", undetectedWithoutFeed, histories)
}
