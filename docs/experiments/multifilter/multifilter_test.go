// Package multifilter reproduces, apart from fencepost, the reading of a
// sharded stream that docs/experiments/node-reader.md tried: one ordered
// consumer filtered on many shards (FilterSubjects), made again often from
// the lowest next sequence of its shards, while the shards are purged
// below what was read and producers publish zipf-distributed ids. It
// imports no fencepost package, so that what it finds can go upstream
// (REPORT.md).
package multifilter

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

const (
	shards = 64     // the transform's partitions
	ids    = 100000 // distinct ids, zipf-drawn
	zipfS  = 1.1
)

// params is one run's configuration.
type params struct {
	seconds   int    // how long the producers publish
	storage   string // "file" or "memory"
	purge     bool   // purge each shard below what was read, every 250 ms
	restart   bool   // make the reader's consumer again every 200-500 ms
	changes   bool   // leave a few random shards out of some consumers (a paused holder)
	single    bool   // one single-filter ordered consumer per shard instead (the control)
	read      int    // shards read (0..read-1) of the 64
	producers int
	purgeLag  uint64        // purge below the last acked seq minus this (and always below the reader's next)
	slowEvery int           // the reader sleeps 1 ms every slowEvery messages (0: never), to lag behind
	readers   int           // multi-filter readers sharing the read shards (each its own consumer)
	moves     bool          // move a random shard from one reader to another every 0.3-1 s (a takeover)
	fpStream  bool          // the stream as fencepost makes it: per-subject limit, discard new per subject, dedupe window, msg ids
	kill      time.Duration // each reader has a connection of its own, closed under its consumer (no Stop) this often: a killed process
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func envBool(name string, def bool) bool {
	v := env(name, strconv.FormatBool(def))
	b, err := strconv.ParseBool(v)
	if err != nil {
		panic(fmt.Sprintf("%s=%q: %v", name, v, err))
	}
	return b
}

func envInt(name string, def int) int {
	v, err := strconv.Atoi(env(name, strconv.Itoa(def)))
	if err != nil {
		panic(fmt.Sprintf("%s: %v", name, err))
	}
	return v
}

func paramsFromEnv(seconds int) params {
	return params{
		seconds:   seconds,
		storage:   env("MULTIFILTER_STORAGE", "file"),
		purge:     envBool("MULTIFILTER_PURGE", true),
		restart:   envBool("MULTIFILTER_RESTART", true),
		changes:   envBool("MULTIFILTER_CHANGES", false),
		single:    envBool("MULTIFILTER_SINGLE", false),
		read:      envInt("MULTIFILTER_READ", 32),
		producers: envInt("MULTIFILTER_PRODUCERS", 3),
		purgeLag:  uint64(envInt("MULTIFILTER_PURGELAG", 2000)),
		slowEvery: envInt("MULTIFILTER_SLOW", 0),
		readers:   envInt("MULTIFILTER_READERS", 1),
		moves:     envBool("MULTIFILTER_MOVES", false),
		fpStream:  envBool("MULTIFILTER_FPSTREAM", false),
		kill:      time.Duration(envInt("MULTIFILTER_KILL_MS", 0)) * time.Millisecond,
	}
}

// TestMultiFilterOrderedConsumer_NoGap: every message of every read
// shard is delivered to the multi-filter reader, in stream order, once.
// The truth is the producers' PubAcks (seq of each id's publish; the
// shard is the server's partition: FNV-1a of the id modulo 64). Purges
// never remove a message the reader has not passed, so every acked
// message of a read shard must have been delivered.
//
// Runs only with MULTIFILTER_SECONDS set: it publishes as fast as the
// machine allows and is meant for a reproduction, not for CI.
func TestMultiFilterOrderedConsumer_NoGap(t *testing.T) {
	s := os.Getenv("MULTIFILTER_SECONDS")
	if s == "" {
		t.Skip("set MULTIFILTER_SECONDS (and MULTIFILTER_STORAGE, _PURGE, _RESTART, _CHANGES, _SINGLE, _READ, _PRODUCERS) to run")
	}
	secs, err := strconv.Atoi(s)
	require.NoError(t, err)
	p := paramsFromEnv(secs)
	run(t, p)
}

type round struct {
	start  uint64
	shards int
	at     time.Duration
}

// shardState is one read shard's reading: next and the list delivered,
// written only by the one goroutine that reads the shard.
type shardState struct {
	mu        sync.Mutex // held while a message of the shard is recorded, and while it moves
	owner     atomic.Int32
	next      atomic.Uint64
	delivered []uint64
	rounds    []int // the round of each delivered message
}

type pub struct {
	seq uint64
	id  int
}

func partition(id string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return int(h.Sum32() % shards)
}

func idName(n int) string { return "i" + strconv.Itoa(n) }

// startServer starts an embedded server with JetStream, its store in the
// test's temporary directory, and connects to it; both end with the test.
func startServer(t *testing.T) (*server.Server, *nats.Conn) {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true, JetStream: true, StoreDir: t.TempDir()})
	require.NoError(t, err)
	srv.Start()
	t.Cleanup(srv.Shutdown)
	require.True(t, srv.ReadyForConnections(10*time.Second))
	nc, err := nats.Connect(srv.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return srv, nc
}

func run(t *testing.T, p params) {
	t.Logf("params %+v", p)
	srv, nc := startServer(t)
	js, err := jetstream.New(nc)
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	storage := jetstream.FileStorage
	if p.storage == "memory" {
		storage = jetstream.MemoryStorage
	}
	scfg := jetstream.StreamConfig{
		Name:     "S",
		Subjects: []string{"in.>"},
		Storage:  storage,
		SubjectTransform: &jetstream.SubjectTransformConfig{
			Source:      "in.*",
			Destination: "st.{{partition(" + strconv.Itoa(shards) + ",1)}}.{{wildcard(1)}}",
		},
	}
	if p.fpStream {
		scfg.Subjects = []string{"in.*", "dl.*"}
		scfg.Discard = jetstream.DiscardNew
		scfg.DiscardNewPerSubject = true
		scfg.MaxMsgsPerSubject = 100_000
		scfg.MaxBytes = -1
		scfg.Duplicates = 2 * time.Minute
		scfg.AllowDirect = true
		scfg.AllowAtomicPublish = true
	}
	stream, err := js.CreateStream(ctx, scfg)
	require.NoError(t, err)

	// The transform is the one we think it is.
	ack, err := js.Publish(ctx, "in.probe", nil)
	require.NoError(t, err)
	m, err := stream.GetMsg(ctx, ack.Sequence)
	require.NoError(t, err)
	require.Equal(t, "st."+strconv.Itoa(partition("probe"))+".probe", m.Subject)

	began := time.Now()
	state := make([]*shardState, p.read)
	for q := range state {
		state[q] = &shardState{}
		state[q].next.Store(1)
	}
	var lastAcked atomic.Uint64

	// Producers.
	pubs := make([][]pub, p.producers)
	var pubErrs atomic.Int64
	var prodWG sync.WaitGroup
	pubCtx, stopPub := context.WithTimeout(ctx, time.Duration(p.seconds)*time.Second)
	defer stopPub()
	for g := range p.producers {
		prodWG.Add(1)
		go func() {
			defer prodWG.Done()
			pjs, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
			if err != nil {
				t.Error(err)
				return
			}
			r := rand.New(rand.NewSource(int64(g) + 1))
			z := rand.NewZipf(r, zipfS, 1, ids-1)
			body := make([]byte, 64)
			type inflight struct {
				f  jetstream.PubAckFuture
				id int
			}
			batch := make([]inflight, 0, 256)
			var seqs int
			for pubCtx.Err() == nil {
				batch = batch[:0]
				for range 256 {
					id := int(z.Uint64())
					var opts []jetstream.PublishOpt
					if p.fpStream {
						seqs++
						opts = append(opts, jetstream.WithMsgID(strconv.Itoa(g)+"-"+strconv.Itoa(seqs)))
					}
					f, err := pjs.PublishAsync("in."+idName(id), body, opts...)
					if err != nil {
						pubErrs.Add(1)
						continue
					}
					batch = append(batch, inflight{f, id})
				}
				for _, b := range batch {
					select {
					case a := <-b.f.Ok():
						pubs[g] = append(pubs[g], pub{a.Sequence, b.id})
						for {
							l := lastAcked.Load()
							if a.Sequence <= l || lastAcked.CompareAndSwap(l, a.Sequence) {
								break
							}
						}
					case <-b.f.Err():
						pubErrs.Add(1)
					}
				}
			}
		}()
	}

	// Purger: each shard's subjects below the last acked seq minus
	// purgeLag, and for a read shard never at or above its next.
	var purges atomic.Int64
	var purgeErrs atomic.Int64
	purgeDone := make(chan struct{})
	stopPurge := make(chan struct{})
	go func() {
		defer close(purgeDone)
		if !p.purge {
			return
		}
		tk := time.NewTicker(250 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-stopPurge:
				return
			case <-tk.C:
			}
			last := lastAcked.Load()
			if last <= p.purgeLag {
				continue
			}
			low := last - p.purgeLag
			for q := range shards {
				l := low
				if q < p.read {
					l = min(l, state[q].next.Load())
				}
				if l <= 1 {
					continue
				}
				err := stream.Purge(ctx, jetstream.WithPurgeSubject("st."+strconv.Itoa(q)+".*"), jetstream.WithPurgeSequence(l))
				if err != nil {
					purgeErrs.Add(1)
					continue
				}
				purges.Add(1)
			}
		}
	}()

	// Readers.
	var roundsMu sync.Mutex
	var rounds []round
	var unexpected atomic.Int64
	var unexpectedMsgs []string
	var unexpectedMu sync.Mutex
	done := make(chan struct{})
	var readWG sync.WaitGroup
	nReaders := max(p.readers, 1)
	if p.single {
		nReaders = p.read
	}
	changed := make([]chan struct{}, nReaders)
	for i := range changed {
		changed[i] = make(chan struct{}, 1)
	}
	signal := func(i int) {
		select {
		case changed[i] <- struct{}{}:
		default:
		}
	}
	var moves, kills atomic.Int64
	read := func(me int, seed int64) {
		defer readWG.Done()
		r := rand.New(rand.NewSource(seed))
		var handled int
		// A reader killed from time to time reads on a connection of
		// its own, closed under its consumer.
		rstream := stream
		var rnc *nats.Conn
		var connected time.Time
		defer func() {
			if rnc != nil {
				rnc.Close()
			}
		}()
		for {
			select {
			case <-done:
				return
			case <-changed[me]:
			default:
			}
			var owned []int
			for q := range p.read {
				if int(state[q].owner.Load()) == me {
					owned = append(owned, q)
				}
			}
			if len(owned) == 0 {
				select {
				case <-done:
					return
				case <-changed[me]:
				}
				continue
			}
			set := owned
			if p.changes && len(owned) > 1 && r.Intn(3) == 0 {
				// Some shards paused: left out of this consumer.
				set = nil
				for _, q := range owned {
					if r.Intn(8) != 0 {
						set = append(set, q)
					}
				}
				if len(set) == 0 {
					set = owned[:1]
				}
			}
			in := map[int]bool{}
			filters := make([]string, 0, len(set))
			var from uint64
			for _, q := range set {
				in[q] = true
				filters = append(filters, "st."+strconv.Itoa(q)+".*")
				if n := state[q].next.Load(); from == 0 || n < from {
					from = n
				}
			}
			roundsMu.Lock()
			rn := len(rounds)
			rounds = append(rounds, round{start: from, shards: len(set), at: time.Since(began)})
			roundsMu.Unlock()
			if p.kill > 0 && (rnc == nil || rnc.IsClosed()) {
				var err error
				if rnc, err = nats.Connect(srv.ClientURL()); err != nil {
					t.Error(err)
					return
				}
				connected = time.Now()
				rjs, err := jetstream.New(rnc)
				if err == nil {
					rstream, err = rjs.Stream(ctx, "S")
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
			cons, err := rstream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
				FilterSubjects: filters,
				DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
				OptStartSeq:    from,
			})
			if err != nil {
				t.Logf("ordered consumer: %v", err)
				time.Sleep(50 * time.Millisecond)
				continue
			}
			it, err := cons.Messages(jetstream.PullMaxMessages(4096), jetstream.PullExpiry(5*time.Second), jetstream.PullHeartbeat(time.Second))
			if err != nil {
				t.Logf("messages: %v", err)
				continue
			}
			stopRound := make(chan struct{})
			var after <-chan time.Time
			if p.restart || (p.changes && len(set) < len(owned)) {
				after = time.After(time.Duration(200+r.Intn(300)) * time.Millisecond)
			}
			var killAt <-chan time.Time
			if p.kill > 0 {
				killAt = time.After(time.Until(connected.Add(p.kill)))
			}
			go func() {
				select {
				case <-after:
				case <-done:
				case <-changed[me]:
				case <-stopRound:
				case <-killAt:
					// Killed: the connection goes, the consumer stays on
					// the server until its inactive threshold.
					rnc.Close()
					kills.Add(1)
				}
				it.Stop()
			}()
			for {
				m, err := it.Next()
				if err != nil {
					break
				}
				subj := m.Subject()
				parts := strings.Split(subj, ".")
				q := -1
				if len(parts) == 3 {
					q, _ = strconv.Atoi(parts[1])
				}
				md, err := m.Metadata()
				if err != nil || !in[q] {
					unexpected.Add(1)
					unexpectedMu.Lock()
					unexpectedMsgs = append(unexpectedMsgs, fmt.Sprintf("round %d: %s (%v)", rn, subj, err))
					unexpectedMu.Unlock()
					continue
				}
				st := state[q]
				seq := md.Sequence.Stream
				st.mu.Lock()
				if int(st.owner.Load()) != me || seq < st.next.Load() {
					// Moved to another reader (it reads from next on), or
					// read before (a consumer made again starts at the
					// lowest next).
					st.mu.Unlock()
					continue
				}
				st.delivered = append(st.delivered, seq)
				st.rounds = append(st.rounds, rn)
				st.next.Store(seq + 1)
				st.mu.Unlock()
				if handled++; p.slowEvery > 0 && handled%p.slowEvery == 0 {
					time.Sleep(time.Millisecond)
				}
			}
			close(stopRound)
		}
	}
	all := make([]int, p.read)
	for q := range all {
		all[q] = q
	}
	for q := range p.read {
		state[q].owner.Store(int32(q % nReaders))
	}
	for i := range nReaders {
		readWG.Add(1)
		go read(i, int64(i)+100)
	}
	moverDone := make(chan struct{})
	go func() {
		defer close(moverDone)
		if !p.moves || nReaders < 2 {
			return
		}
		r := rand.New(rand.NewSource(7))
		for {
			select {
			case <-done:
				return
			case <-time.After(time.Duration(300+r.Intn(700)) * time.Millisecond):
			}
			q := r.Intn(p.read)
			st := state[q]
			st.mu.Lock()
			from := int(st.owner.Load())
			to := (from + 1 + r.Intn(nReaders-1)) % nReaders
			st.owner.Store(int32(to))
			st.mu.Unlock()
			moves.Add(1)
			signal(from)
			signal(to)
		}
	}()

	prodWG.Wait()
	t.Logf("published for %v; acked %d, publish errors %d, purges %d (errors %d)",
		time.Since(began).Round(time.Millisecond), lastAcked.Load(), pubErrs.Load(), purges.Load(), purgeErrs.Load())

	// The truth: each read shard's acked seqs.
	truth := make([][]uint64, p.read)
	idOf := map[uint64]int{}
	for _, ps := range pubs {
		for _, x := range ps {
			idOf[x.seq] = x.id
			if q := partition(idName(x.id)); q < p.read {
				truth[q] = append(truth[q], x.seq)
			}
		}
	}
	for q := range truth {
		slices.Sort(truth[q])
	}

	// Wait until every read shard's next is past its last acked message.
	deadline := time.Now().Add(60 * time.Second)
	for {
		caught := true
		for q := range p.read {
			if n := len(truth[q]); n > 0 && state[q].next.Load() <= truth[q][n-1] {
				caught = false
			}
		}
		if caught || time.Now().After(deadline) {
			if !caught {
				t.Errorf("readers did not catch up within 60 s (too slow for this machine: fewer shards, readers or seconds)")
			}
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(done)
	readWG.Wait()
	<-moverDone
	close(stopPurge)
	<-purgeDone

	// Compare.
	var lost, notReached, extra, outOfOrder, total int
	for q := range p.read {
		st := state[q]
		total += len(st.delivered)
		for i := 1; i < len(st.delivered); i++ {
			if st.delivered[i] <= st.delivered[i-1] {
				outOfOrder++
			}
		}
		got := map[uint64]bool{}
		for _, s := range st.delivered {
			got[s] = true
			if _, ok := idOf[s]; ok && partition(idName(idOf[s])) != q {
				extra++
				t.Errorf("shard %d: seq %d delivered, but it is id %d of shard %d", q, s, idOf[s], partition(idName(idOf[s])))
			}
		}
		// Runs of lost messages.
		var run []uint64
		flush := func() {
			if len(run) == 0 {
				return
			}
			// The delivered message right before the run, and right after.
			i, _ := slices.BinarySearch(st.delivered, run[0])
			if i == len(st.delivered) {
				// Nothing delivered after it: the reader never got
				// there (it did not catch up), not a gap.
				notReached += len(run)
				t.Errorf("shard %d: the last %d acked messages (from seq %d) not reached: the reader did not catch up", q, len(run), run[0])
				run = nil
				return
			}
			lost += len(run)
			var before, after string
			if i > 0 {
				before = fmt.Sprintf("seq %d in round %d", st.delivered[i-1], st.rounds[i-1])
			}
			if i < len(st.delivered) {
				rr := st.rounds[i]
				roundsMu.Lock()
				after = fmt.Sprintf("seq %d in round %d (round start %d, %d shards, at %v)", st.delivered[i], rr, rounds[rr].start, rounds[rr].shards, rounds[rr].at.Round(time.Millisecond))
				roundsMu.Unlock()
			}
			t.Errorf("shard %d: %d acked messages never delivered, seqs %d..%d (ids %d..); delivered before: %s; after: %s",
				q, len(run), run[0], run[len(run)-1], idOf[run[0]], before, after)
			run = nil
		}
		for _, s := range truth[q] {
			if got[s] {
				flush()
				continue
			}
			run = append(run, s)
		}
		flush()
	}
	unexpectedMu.Lock()
	for i, u := range unexpectedMsgs {
		if i == 10 {
			break
		}
		t.Errorf("unexpected message: %s", u)
	}
	unexpectedMu.Unlock()
	t.Logf("read shards %d by %d readers: delivered %d, lost %d (gaps), not reached %d, out of order %d, wrong shard %d, unexpected %d, consumers made %d, moves %d, kills %d",
		p.read, nReaders, total, lost, notReached, outOfOrder, extra, unexpected.Load(), len(rounds), moves.Load(), kills.Load())
	require.Zero(t, lost, "lost")
	require.Zero(t, outOfOrder, "out of order")
	require.Zero(t, unexpected.Load(), "unexpected")
}
