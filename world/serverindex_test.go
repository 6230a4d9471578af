package world_test

import (
	"context"
	"flag"
	"fmt"
	"math/rand"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/server/servertest"
	"github.com/fencepost/fencepost/world"
)

var indexProbe = flag.Duration("index-probe", 4*time.Second, "how long TestServerIndex_UnderHeadCompactions posts and removes")
var indexProbeIDs = flag.Int("index-probe-ids", 400, "how many ids TestServerIndex_UnderHeadCompactions posts to")

// removal is a purge the probe sent: of one subject (subj) or, with subj
// empty, of the whole stream (a compaction), below sequence below. start
// is when it was sent: nothing it removes is gone before then.
type removal struct {
	subj  string
	below uint64
	start time.Time
}

// indexRead is a direct get by subject the probe sent: the batch from
// sequence from of subj, sent at sent and answered at done with seqs.
type indexRead struct {
	subj       string
	from       uint64
	sent, done time.Time
	seqs       []uint64
	full       bool
	// known: how many posts of subj were acknowledged when the read was
	// sent (its first known of acked[subj], in order of acknowledgement).
	known int
}

// republished is a post as the republish delivered it: its stored
// subject and sequence, and the server's Nats-Last-Sequence (the
// subject's last stored message when it was stored).
type republished struct {
	subj      string
	seq, last uint64
}

// TestServerIndex_UnderHeadCompactions checks the two answers of the
// server's per-subject index that the reads of a partitioned world rest
// on (docs/design.md 3.13 points 2 and 3), under the pattern of the
// partitioned-sweep experiment's lossy variant (3.15, "The loss, named"):
// posts flow to many ids, Zipf-distributed, while the mailbox stream is
// compacted at its head (a purge without a filter below the highest
// sequence acknowledged, or read by an ordered consumer of the whole
// stream, plus one) and single ids are purged below one of their posts.
//
//   - Each republished post's Nats-Last-Sequence is the id's previous post,
//     or 0 when a purge sent before the post was acknowledged could have
//     removed that one.
//   - A direct get by subject (a batch, as a drain reads from its cursor,
//     from a recent post or from after an older one, often below the
//     stream's first sequence) skips no message of the subject that was
//     acknowledged before the get was sent and that no purge sent before
//     its answer came could have removed.
//
// Nothing of fencepost runs but the world's streams. -index-probe sets
// how long it runs, -index-probe-ids over how many ids.
func TestServerIndex_UnderHeadCompactions(t *testing.T) {
	srv := servertest.New(t)
	nc, js := servertest.Connect(t, srv.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), *indexProbe+2*time.Minute)
	defer cancel()
	const name, parts, posters = "probe", 64, 4
	ids := *indexProbeIDs
	_, err := world.Create(ctx, js, name, world.Config{Partitions: parts})
	require.NoError(t, err)
	stream := wire.MailboxStream(name)

	var (
		mu       sync.Mutex
		acked    = map[string][]uint64{} // subject: acknowledged sequences, in order of acknowledgement
		ackedAt  = map[uint64]time.Time{}
		removals []removal
		reads    []indexRead
		highest  atomic.Uint64
	)
	subjects := make([]string, ids)
	for i := range subjects {
		subjects[i] = wire.MailboxSubject(name, fmt.Sprintf("id-%d", i))
	}

	var rp []republished
	var rpMu sync.Mutex
	sub, err := nc.Subscribe(wire.RepublishFilter(name), func(m *nats.Msg) {
		seq, _ := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
		last, _ := strconv.ParseUint(m.Header.Get("Nats-Last-Sequence"), 10, 64)
		rpMu.Lock()
		rp = append(rp, republished{subj: m.Header.Get(jetstream.SubjectHeader), seq: seq, last: last})
		rpMu.Unlock()
	})
	require.NoError(t, err)
	require.NoError(t, sub.SetPendingLimits(-1, -1))
	require.NoError(t, nc.Flush())

	stop := make(chan struct{})
	var wg sync.WaitGroup
	body := make([]byte, 64)
	// Posters: Zipf over the ids (s = 1.1, as the bench's zipf), as fast
	// as the server acknowledges.
	for p := range posters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			z := rand.NewZipf(rand.New(rand.NewSource(int64(p))), 1.1, 1, uint64(ids-1))
			for {
				select {
				case <-stop:
					return
				default:
				}
				subj := subjects[z.Uint64()]
				ack, err := js.Publish(ctx, subj, body)
				if err != nil {
					t.Errorf("post to %s: %v", subj, err)
					return
				}
				now := time.Now()
				mu.Lock()
				acked[subj] = append(acked[subj], ack.Sequence)
				ackedAt[ack.Sequence] = now
				mu.Unlock()
				for h := highest.Load(); h < ack.Sequence && !highest.CompareAndSwap(h, ack.Sequence); h = highest.Load() {
				}
			}
		}()
	}
	// The sweeper's read: the whole stream, headers only, with an ordered
	// consumer, as the experiment's sweeper read it.
	var swept atomic.Uint64
	mb, err := js.Stream(ctx, stream)
	require.NoError(t, err)
	cons, err := mb.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy, HeadersOnly: true})
	require.NoError(t, err)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		if md, err := m.Metadata(); err == nil {
			swept.Store(md.Sequence.Stream)
		}
	})
	require.NoError(t, err)
	defer cc.Stop()
	// The compactor: every 10-100 ms, a purge without a filter below the
	// highest sequence the sweeper's read or a poster's acknowledgement
	// has seen plus one (a whole purge when nothing
	// was stored since, a compaction inside the block being written
	// otherwise), now and then a little below it.
	wg.Add(1)
	go func() {
		defer wg.Done()
		r := rand.New(rand.NewSource(99))
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(10+r.Intn(90)) * time.Millisecond):
			}
			below := highest.Load() + 1
			if r.Intn(2) == 0 {
				below = swept.Load() + 1
			} else if r.Intn(4) == 0 && below > 50 {
				below -= uint64(r.Intn(50))
			}
			mu.Lock()
			removals = append(removals, removal{below: below, start: time.Now()})
			mu.Unlock()
			if err := jsapi.Purge(ctx, nc, stream, "", below); err != nil {
				t.Errorf("compact below %d: %v", below, err)
				return
			}
		}
	}()
	// The holdings' purges: one id below one of its acknowledged posts.
	wg.Add(1)
	go func() {
		defer wg.Done()
		r := rand.New(rand.NewSource(7))
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(r.Intn(5)) * time.Millisecond):
			}
			subj := subjects[r.Intn(ids)]
			mu.Lock()
			seqs := acked[subj]
			var below uint64
			if len(seqs) > 0 {
				below = seqs[r.Intn(len(seqs))] + 1
			}
			if below > 0 {
				removals = append(removals, removal{subj: subj, below: below, start: time.Now()})
			}
			mu.Unlock()
			if below == 0 {
				continue
			}
			if err := jsapi.Purge(ctx, nc, stream, subj, below); err != nil {
				t.Errorf("purge %s below %d: %v", subj, below, err)
				return
			}
		}
	}()
	// Readers: a batch by subject of an id (Zipf: mostly the hot ones).
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewSource(int64(100 + g)))
			z := rand.NewZipf(r, 1.1, 1, uint64(ids-1))
			for {
				select {
				case <-stop:
					return
				default:
				}
				subj := subjects[z.Uint64()]
				mu.Lock()
				seqs := acked[subj]
				var from uint64 = 1
				known := len(seqs)
				switch {
				case len(seqs) == 0:
				case r.Intn(2) == 0:
					// From a recent post, which is most likely stored.
					from = seqs[len(seqs)-1-r.Intn(min(len(seqs), 8))]
				default:
					// From after an older one, as a drain reads from
					// its cursor: often below the stream's first
					// sequence, or in what a purge removed.
					from = seqs[len(seqs)-1-r.Intn(min(len(seqs), 64))] + 1
				}
				mu.Unlock()
				const batch = 16
				sent := time.Now()
				b, err := jsapi.DirectGet(ctx, nc, stream, jsapi.GetRequest{Seq: from, NextFor: subj, Batch: batch})
				done := time.Now()
				if err != nil {
					t.Errorf("read %s from %d: %v", subj, from, err)
					return
				}
				rd := indexRead{subj: subj, from: from, sent: sent, done: done, full: len(b.Msgs) == batch, known: known}
				for _, m := range b.Msgs {
					if m.Subject != subj {
						t.Errorf("read %s from %d: message %d is of %s", subj, from, m.Sequence, m.Subject)
					}
					rd.seqs = append(rd.seqs, m.Sequence)
				}
				mu.Lock()
				reads = append(reads, rd)
				mu.Unlock()
			}
		}()
	}
	time.Sleep(*indexProbe) // the probe's length, not a synchronisation: everything after waits on its own condition
	close(stop)
	wg.Wait()
	require.False(t, t.Failed())

	// Every acknowledged post is republished once.
	total := 0
	for _, seqs := range acked {
		total += len(seqs)
	}
	require.Eventually(t, func() bool {
		rpMu.Lock()
		defer rpMu.Unlock()
		return len(rp) >= total
	}, 30*time.Second, 10*time.Millisecond, "republished posts")
	rpMu.Lock()
	defer rpMu.Unlock()

	// removedBy says whether a removal started before t could have
	// removed message x of subj: whether the highest bound of the
	// compactions, or of subj's purges, started before t is above x.
	type bound struct {
		start time.Time
		below uint64 // the highest of this removal's and those before it
	}
	bounds := map[string][]bound{} // "": the compactions
	sort.Slice(removals, func(i, j int) bool { return removals[i].start.Before(removals[j].start) })
	for _, r := range removals {
		bs := bounds[r.subj]
		b := bound{start: r.start, below: r.below}
		if n := len(bs); n > 0 {
			b.below = max(b.below, bs[n-1].below)
		}
		bounds[r.subj] = append(bs, b)
	}
	highestBefore := func(bs []bound, t time.Time) uint64 {
		i := sort.Search(len(bs), func(i int) bool { return !bs[i].start.Before(t) })
		if i == 0 {
			return 0
		}
		return bs[i-1].below
	}
	removedBy := func(subj string, x uint64, t time.Time) bool {
		return x < highestBefore(bounds[""], t) || x < highestBefore(bounds[subj], t)
	}
	// byseq: each subject's acknowledged posts by sequence, with their
	// place in the order of acknowledgement.
	type post struct {
		seq uint64
		nth int
	}
	byseq := map[string][]post{}
	for subj, seqs := range acked {
		ps := make([]post, len(seqs))
		for i, seq := range seqs {
			ps[i] = post{seq, i}
		}
		sort.Slice(ps, func(i, j int) bool { return ps[i].seq < ps[j].seq })
		byseq[subj] = ps
	}
	prev := func(subj string, m uint64) uint64 {
		ps := byseq[subj]
		i := sort.Search(len(ps), func(i int) bool { return ps[i].seq >= m })
		if i == 0 {
			return 0
		}
		return ps[i-1].seq
	}

	var bad []string
	once := make(map[uint64]bool, len(rp))
	for _, m := range rp {
		if once[m.seq] || ackedAt[m.seq].IsZero() {
			bad = append(bad, fmt.Sprintf("post %d of %s was republished twice, or never acknowledged", m.seq, m.subj))
		}
		once[m.seq] = true
		x := prev(m.subj, m.seq)
		switch {
		case m.last == x:
		case m.last == 0 && removedBy(m.subj, x, ackedAt[m.seq]):
		default:
			bad = append(bad, fmt.Sprintf("post %d of %s was republished naming %d as the subject's last, not %d (acknowledged at %s; removed by then: %v)",
				m.seq, m.subj, m.last, x, ackedAt[m.seq].Format("15:04:05.000000"), removedBy(m.subj, x, ackedAt[m.seq])))
		}
	}
	for _, rd := range reads {
		got := map[uint64]bool{}
		for _, s := range rd.seqs {
			got[s] = true
		}
		upto := uint64(1<<64 - 1)
		if rd.full {
			upto = rd.seqs[len(rd.seqs)-1]
		}
		ps := byseq[rd.subj]
		// later counts the posts acknowledged after the read was sent:
		// one of them stored before a post acknowledged before is one
		// that another poster had in flight, and each poster has one at
		// a time, so past 2*posters of them no post known to the read is left.
		later := 0
		for _, p := range ps[sort.Search(len(ps), func(i int) bool { return ps[i].seq >= rd.from }):] {
			x := p.seq
			if x > upto || later > 2*posters {
				break
			}
			if p.nth >= rd.known {
				later++
				continue
			}
			if got[x] || removedBy(rd.subj, x, rd.done) {
				continue
			}
			bad = append(bad, fmt.Sprintf("a read of %s from %d (sent %s) answered %v without %d, acknowledged at %s and never purged by then",
				rd.subj, rd.from, rd.sent.Format("15:04:05.000000"), rd.seqs, x, ackedAt[x].Format("15:04:05.000000")))
			break
		}
	}
	compactions := 0
	for _, r := range removals {
		if r.subj == "" {
			compactions++
		}
	}
	t.Logf("%d posts, %d republished, %d reads, %d compactions, %d purges of one id", total, len(rp), len(reads), compactions, len(removals)-compactions)
	if len(bad) > 10 {
		bad = append(bad[:10], fmt.Sprintf("... and %d more", len(bad)-10))
	}
	require.Empty(t, bad)
}
