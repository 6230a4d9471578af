package world_test

import (
	"context"
	"flag"
	"fmt"
	"math/rand"
	"sort"
	"strconv"
	"strings"
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

var indexProbe = flag.Duration("index-probe", 4*time.Second, "how long TestServerIndex_UnderHeadPurges posts and removes")
var indexProbeEvery = flag.Duration("index-probe-every", 100*time.Millisecond, "at most how long TestServerIndex_UnderHeadPurges waits between purges at the head")
var indexProbeLag = flag.Int("index-probe-lag", 50, "at most how far below the head TestServerIndex_UnderHeadPurges purges, in messages")
var indexProbeCompact = flag.Bool("index-probe-compact", false, "TestServerIndex_UnderHeadPurges purges at the head without a filter (compactions, which fencepost does not do: TestServer_CompactionAfterAnEmptiedBlockLoses)")
var indexProbePurgeAfter = flag.Duration("index-probe-purge-after", 500*time.Millisecond, "how long after its acknowledgement TestServerIndex_UnderHeadPurges purges a post")
var indexProbeIDs = flag.Int("index-probe-ids", 400, "how many ids TestServerIndex_UnderHeadPurges posts to")

// removal is a purge the probe sent: of one subject (subj) or, with subj
// empty, of every mailbox (at the head), below sequence below. start
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

// TestServerIndex_UnderHeadPurges checks the answers of the server's
// per-subject index that the reads of a partitioned world rest on
// (docs/design/partitions.md, "Why no message is skipped",
// points 2 and 3), and that what it stores is what
// it was told to keep, while posts flow Zipf-distributed to many ids,
// each post is purged with its id's older ones some time after it was
// acknowledged (as a holding purges what it committed), and every
// mailbox is purged at the stream's head (below the highest sequence
// acknowledged, or read by an ordered consumer of the whole stream, plus
// one, as a sweep; the pattern of the partitioned-sweep experiment,
// 3.15):
//
//   - Each republished post's Nats-Last-Sequence is the id's previous post,
//     or 0 when a purge sent before the post was acknowledged could have
//     removed that one.
//   - A direct get by subject (a batch, as a drain reads from its cursor,
//     from a recent post or from after an older one, often below the
//     stream's first sequence), and one of every mailbox from the last
//     purge at the head, skip no message acknowledged before the get was
//     sent that no purge sent before its answer came could have removed.
//   - The server warns of no inconsistency in its store.
//
// Nothing of fencepost runs but the world's streams. Flags make it
// longer, wider, slower or a compaction (-index-probe*).
func TestServerIndex_UnderHeadPurges(t *testing.T) {
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
		all      []uint64                // every subject's, in order of acknowledgement
		subjOf   = map[uint64]string{}
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
				all = append(all, ack.Sequence)
				subjOf[ack.Sequence] = subj
				ackedAt[ack.Sequence] = now
				highest.Store(max(highest.Load(), ack.Sequence)) // every writer holds mu
				mu.Unlock()
			}
		}()
	}
	// The sweeper's read: the whole stream, headers only, with an ordered
	// consumer, as the experiment's sweeper read it.
	var swept, headPurged atomic.Uint64
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
	// The sweep: every -index-probe-every at most, a purge of every
	// mailbox below the highest sequence the sweeper's read or a poster's
	// acknowledgement has seen plus one, now and then a little below it
	// (-index-probe-lag).
	wg.Add(1)
	go func() {
		defer wg.Done()
		r := rand.New(rand.NewSource(99))
		for {
			select {
			case <-stop:
				return
			case <-time.After(*indexProbeEvery/10 + time.Duration(r.Int63n(int64(*indexProbeEvery)*9/10))):
			}
			below := highest.Load() + 1
			if r.Intn(2) == 0 {
				below = swept.Load() + 1
			} else if lag := uint64(*indexProbeLag); r.Intn(4) == 0 && below > lag {
				below -= uint64(r.Int63n(int64(lag)))
			}
			mu.Lock()
			removals = append(removals, removal{below: below, start: time.Now()})
			mu.Unlock()
			headPurged.Store(below)
			filter := wire.MailboxFilter(name)
			if *indexProbeCompact {
				filter = ""
			}
			if err := jsapi.Purge(ctx, nc, stream, filter, below); err != nil {
				t.Errorf("purge %q below %d: %v", filter, below, err)
				return
			}
		}
	}()
	// The holdings' purges: each post, some time after it was
	// acknowledged (-index-probe-purge-after), is purged with its id's
	// older ones (below it plus one), as a holding purges what it
	// committed; many are in blocks before the one being written.
	var purgedTo atomic.Int64 // the next post, in order of acknowledgement, to purge
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				mu.Lock()
				i := int(purgedTo.Load())
				if i >= len(all) || time.Since(ackedAt[all[i]]) < *indexProbePurgeAfter || !purgedTo.CompareAndSwap(int64(i), int64(i+1)) {
					mu.Unlock()
					time.Sleep(time.Millisecond) // nothing to purge yet: poll
					continue
				}
				subj, below := subjOf[all[i]], all[i]+1
				removals = append(removals, removal{subj: subj, below: below, start: time.Now()})
				mu.Unlock()
				if err := jsapi.Purge(ctx, nc, stream, subj, below); err != nil {
					t.Errorf("purge %s below %d: %v", subj, below, err)
					return
				}
			}
		}()
	}
	// The scanner: every message of every mailbox from the last
	// purge at the head's bound on, as a sweeper or a worker's scan would, so
	// that the ids the Zipf readers below rarely read are checked too.
	wg.Add(1)
	go func() {
		defer wg.Done()
		filter := wire.MailboxFilter(name)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			const batch = 4096
			from := max(headPurged.Load(), 1)
			mu.Lock()
			known := len(all)
			mu.Unlock()
			sent := time.Now()
			b, err := jsapi.DirectGet(ctx, nc, stream, jsapi.GetRequest{Seq: from, NextFor: filter, Batch: batch})
			done := time.Now()
			if err != nil {
				t.Errorf("scan from %d: %v", from, err)
				return
			}
			rd := indexRead{from: from, sent: sent, done: done, full: len(b.Msgs) == batch, known: known}
			for _, m := range b.Msgs {
				rd.seqs = append(rd.seqs, m.Sequence)
			}
			mu.Lock()
			reads = append(reads, rd)
			mu.Unlock()
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
	// purges of every mailbox, or of subj's, started before t is above x.
	type bound struct {
		start time.Time
		below uint64 // the highest of this removal's and those before it
	}
	bounds := map[string][]bound{} // "": the purges of every mailbox
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
	sorted := func(seqs []uint64) []post {
		ps := make([]post, len(seqs))
		for i, seq := range seqs {
			ps[i] = post{seq, i}
		}
		sort.Slice(ps, func(i, j int) bool { return ps[i].seq < ps[j].seq })
		return ps
	}
	byseq := map[string][]post{"": sorted(all)} // "": every subject's, for the scans
	for subj, seqs := range acked {
		byseq[subj] = sorted(seqs)
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
			if got[x] || removedBy(subjOf[x], x, rd.done) {
				continue
			}
			what := "a read of " + rd.subj
			if rd.subj == "" {
				what = "a scan of every mailbox"
			}
			bad = append(bad, fmt.Sprintf("%s from %d (sent %s) answered %d messages (%v) without %d of %s, acknowledged at %s and never purged by then",
				what, rd.from, rd.sent.Format("15:04:05.000000"), len(rd.seqs), ends(rd.seqs), x, subjOf[x], ackedAt[x].Format("15:04:05.000000")))
			break
		}
	}
	// The store's own check of itself: after each purge it compares its
	// state with its blocks' (fileStore.writeFullState) and, when they
	// differ, warns and rebuilds its state from the blocks.
	for _, line := range srv.Warnings() {
		if strings.Contains(line, "Filestore") {
			bad = append(bad, "the server: "+line)
		}
	}
	heads := 0
	for _, r := range removals {
		if r.subj == "" {
			heads++
		}
	}
	t.Logf("%d posts, %d republished, %d reads, %d purges at the head, %d purges of one id", total, len(rp), len(reads), heads, len(removals)-heads)
	if len(bad) > 10 {
		bad = append(bad[:10], fmt.Sprintf("... and %d more", len(bad)-10))
	}
	require.Empty(t, bad)
}

// ends is seqs, or its first and last four when longer.
func ends(seqs []uint64) string {
	if len(seqs) <= 8 {
		return fmt.Sprint(seqs)
	}
	return fmt.Sprintf("%v ... %v", seqs[:4], seqs[len(seqs)-4:])
}
