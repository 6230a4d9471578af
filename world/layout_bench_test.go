package world_test

import (
	"cmp"
	"context"
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
	"github.com/fencepost/fencepost/server/servertest"
	"github.com/fencepost/fencepost/testkit/testutil"
)

// BenchmarkFanInLayout runs fan-in's shape end to end (producers posting
// one message per id per round over 10,000 ids, 4 workers draining, the
// claims, cursor reads and fenced commits of fencepost's protocol) with
// a minimal client of its own, none of fencepost's code, on four mailbox
// layouts, beside raw JetStream in the same run (docs/experiments/ack-removal.md):
//
//   - raw: post, one pull consumer of every subject, batches of 1,000,
//     one acknowledgement per batch (the bench's raw side in fan-in);
//   - purge: today's layout (docs/design/partitions.md): the mailbox stream republishes each
//     post to its partition, read by a core subscription per worker; a
//     message leaves by a purge of its id's subject once the fenced
//     commit that covers it was accepted;
//   - ack: removal by acknowledgement: the mailbox stream is a work
//     queue whose subject transform stores each post under its partition,
//     read by one pull consumer per partition; a message leaves by its
//     acknowledgement once the fenced commit that covers it was accepted;
//   - sweep: removal by a sweep of each partition: the subject transform
//     stores each post under its partition and the stream republishes it,
//     as purge does; every 20 ms each worker purges each partition it
//     serves below the first message of it not committed yet
//     (docs/experiments/sweep-per-partition.md);
//   - partown: ownership by partition, which fencepost does not have
//     (docs/experiments/partition-ownership.md): the sweep layout's stream, but each worker
//     claims the partitions it serves (a record per partition) instead of
//     ids, and commits one cursor per partition of a batch, the batch's
//     last message of it, fenced by the partition's record; removal is
//     the sweep's. No per-id claim, cursor read or commit.
//
// Each worker serves one of 4 partitions (+partsN: N partitions, N/4
// served by each worker; on the ack layout a consumer per partition,
// +memstate with its state in memory, docs/experiments/ack-removal.md) and takes its messages
// in batches of up to 1,000: it claims the ids it does not hold (a record
// write conditional on there being none) and reads their cursors (one
// multi-last direct get), commits each message's cursor conditional on
// its id's record (asynchronously, all of a batch in flight), waits for
// the batch's commits, then removes the batch. With +protocol each
// worker also pays what fencepost's worker adds per id: a watch of every
// ownership record (an ordered consumer of the records, as Watch), and a
// holder check before each batch (one multi-last direct get of the
// batch's records, as Store.Unchanged batched); +watch and +check pay
// one of the two. cpu-us/op is the process's CPU (server, producer and
// workers) per delivered message; ns/op is the wall time per message.
// Run it as
//
//	go test -run '^$' -bench FanInLayout -benchtime 30000x -count 3 ./world/
//
// (30,000 messages: three rounds over the 10,000 ids, as the bench's
// fan-in at smoke size).
func BenchmarkFanInLayout(b *testing.B) {
	for _, layout := range []string{"raw", "purge", "ack", "sweep", "partown"} {
		b.Run(layout, func(b *testing.B) { runFanInLayout(b, layout, layoutExtra{}) })
	}
	for _, layout := range []string{"purge", "ack", "sweep", "partown"} {
		for _, extra := range []layoutExtra{{watch: true, check: true}, {watch: true}, {check: true}} {
			b.Run(layout+extra.String(), func(b *testing.B) { runFanInLayout(b, layout, extra) })
		}
	}
	// The partitions' shape (docs/experiments/ack-removal.md): 4 (one a worker, as above, but
	// each consumer's messages taken as they come, as with more), 16, or
	// a world's default of 64 (16 served by each worker); on the ack
	// layout a durable consumer per partition, its state on file (as a
	// stream's own) or in memory.
	for _, extra := range []layoutExtra{{parts: 4}, {parts: 4, memState: true}, {parts: 16, memState: true}, {parts: 64}, {parts: 64, memState: true}} {
		for _, layout := range []string{"purge", "ack", "sweep", "partown"} {
			if layout != "ack" && extra.memState {
				continue // no consumers
			}
			b.Run(layout+extra.String(), func(b *testing.B) { runFanInLayout(b, layout, extra) })
		}
	}
}

// layoutExtra is what a worker pays beyond the claims, cursor reads and
// commits: the watch of every record, the holder checks; and the shape of
// the partitions: how many (0: one per worker), and whether the ack
// layout's consumers keep their state in memory.
type layoutExtra struct {
	watch, check bool
	parts        int
	memState     bool
}

func (e layoutExtra) String() string {
	var s string
	switch {
	case e.watch && e.check:
		s = "+protocol"
	case e.watch:
		s = "+watch"
	case e.check:
		s = "+check"
	}
	if e.parts > 0 {
		s += "+parts" + strconv.Itoa(e.parts)
	}
	if e.memState {
		s += "+memstate"
	}
	return s
}

// partitions is how many partitions the mailbox stream has: one per
// worker unless e says.
func (e layoutExtra) partitions() int { return cmp.Or(e.parts, layoutWorkers) }

// served is the partitions worker w serves.
func (e layoutExtra) served(w int) []int {
	var qs []int
	for q := w; q < e.partitions(); q += layoutWorkers {
		qs = append(qs, q)
	}
	return qs
}

const (
	layoutIDs     = 10000
	layoutWorkers = 4
	layoutBatch   = 1000
)

func runFanInLayout(b *testing.B, layout string, extra layoutExtra) {
	srv := servertest.New(b)
	nc, js := servertest.Connect(b, srv.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	b.Cleanup(cancel)
	switch layout {
	case "raw":
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "M", Subjects: []string{"m.*"}, Storage: jetstream.FileStorage})
		require.NoError(b, err)
	case "purge":
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "M", Subjects: []string{"m.*"}, Storage: jetstream.FileStorage, AllowDirect: true,
			RePublish: &jetstream.RePublish{Source: "m.*", Destination: "rp.{{partition(" + strconv.Itoa(extra.partitions()) + ",1)}}.{{wildcard(1)}}"}})
		require.NoError(b, err)
	case "ack", "sweep", "partown":
		// Each post stored under its partition, p.<k>.<id>: read by a
		// consumer per partition from a work queue, or republished and
		// swept.
		cfg := jetstream.StreamConfig{Name: "M", Subjects: []string{"m.*"}, Storage: jetstream.FileStorage, AllowDirect: true,
			SubjectTransform: &jetstream.SubjectTransformConfig{Source: "m.*", Destination: "p.{{partition(" + strconv.Itoa(extra.partitions()) + ",1)}}.{{wildcard(1)}}"}}
		if layout == "ack" {
			cfg.Retention = jetstream.WorkQueuePolicy
		} else {
			cfg.RePublish = &jetstream.RePublish{Source: "p.*.*", Destination: "rp.{{wildcard(1)}}.{{wildcard(2)}}"}
		}
		_, err := js.CreateStream(ctx, cfg)
		require.NoError(b, err)
	}
	if layout != "raw" {
		// Records r.<id> and cursors c.<id>, one message each, as a
		// world's bucket.
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "B", Subjects: []string{"r.*", "c.*"}, MaxMsgsPerSubject: 1, Storage: jetstream.FileStorage, AllowDirect: true})
		require.NoError(b, err)
	}

	var delivered atomic.Int64
	done := make(chan struct{})
	deliveredN := func(n int) {
		if delivered.Add(int64(n)) >= int64(b.N) {
			select {
			case <-done:
			default:
				close(done)
			}
		}
	}
	var wg sync.WaitGroup
	wctx, stopWorkers := context.WithCancel(ctx)
	start := func(f func(ctx context.Context) error) {
		wg.Go(func() {
			if err := f(wctx); err != nil && wctx.Err() == nil {
				b.Error(err)
				cancel() // the wait below ends at once
			}
		})
	}
	// newWorker connects a worker of its own, watching if asked.
	newWorker := func() *layoutWorker {
		nc, js := servertest.Connect(b, srv.ClientURL())
		lw := newLayoutWorker(nc, js, extra.check)
		if extra.watch {
			lw.watch(b, wctx)
		}
		return lw
	}
	switch layout {
	case "raw":
		st, err := js.Stream(ctx, "M")
		require.NoError(b, err)
		cons, err := st.CreateConsumer(ctx, jetstream.ConsumerConfig{AckPolicy: jetstream.AckAllPolicy, MaxAckPending: -1})
		require.NoError(b, err)
		start(func(ctx context.Context) error {
			for ctx.Err() == nil {
				batch, err := cons.Fetch(layoutBatch, jetstream.FetchMaxWait(100*time.Millisecond))
				if err != nil {
					return err
				}
				var last jetstream.Msg
				n := 0
				for m := range batch.Messages() {
					last, n = m, n+1
				}
				if last != nil {
					if err := last.Ack(); err != nil {
						return err
					}
					deliveredN(n)
				}
			}
			return nil
		})
	case "purge", "sweep", "partown":
		for w := range layoutWorkers {
			lw := newWorker()
			if layout == "partown" {
				require.NoError(b, lw.claimPartitions(ctx, extra.served(w)))
			}
			// Room for every message: a chan subscription drops what
			// does not fit.
			in := make(chan *nats.Msg, b.N)
			var sw *layoutSweep // nil: each message purged by its id
			if layout != "purge" {
				sw = &layoutSweep{nc: lw.nc, marks: map[string]uint64{}, swept: map[string]uint64{}}
				start(sw.run)
			}
			for _, q := range extra.served(w) {
				_, err := lw.nc.ChanSubscribe("rp."+strconv.Itoa(q)+".*", in)
				require.NoError(b, err)
			}
			require.NoError(b, lw.nc.Flush())
			deliver := lw.deliver
			if layout == "partown" {
				deliver = lw.deliverPartitions
			}
			start(func(ctx context.Context) error {
				for {
					var batch []layoutMsg
					select {
					case m := <-in:
						batch = append(batch, republishedMsg(m))
					case <-ctx.Done():
						return nil
					}
					for len(batch) < layoutBatch && len(in) > 0 {
						batch = append(batch, republishedMsg(<-in))
					}
					if err := deliver(ctx, batch); err != nil {
						return err
					}
					if sw != nil {
						sw.committed(batch)
					} else if err := lw.purge(ctx, batch); err != nil {
						return err
					}
					deliveredN(len(batch))
				}
			})
		}
	case "ack":
		st, err := js.Stream(ctx, "M")
		require.NoError(b, err)
		for w := range layoutWorkers {
			lw := newWorker()
			// The worker's consumers, as seen through its own connection.
			var conss []jetstream.Consumer
			for _, q := range extra.served(w) {
				name := "p" + strconv.Itoa(q)
				_, err := st.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: name, FilterSubject: "p." + strconv.Itoa(q) + ".*",
					AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: -1, AckWait: time.Minute, MemoryStorage: extra.memState})
				require.NoError(b, err)
				wst, err := lw.js.Stream(ctx, "M")
				require.NoError(b, err)
				wcons, err := wst.Consumer(ctx, name)
				require.NoError(b, err)
				conss = append(conss, wcons)
			}
			// The default shape (one partition a worker): fetch in
			// batches; +partsN (N = 4 too): each consumer's messages as
			// they come, into one channel, taken in batches.
			fetch := func(ctx context.Context) ([]jetstream.Msg, error) {
				fetched, err := conss[0].Fetch(layoutBatch, jetstream.FetchMaxWait(100*time.Millisecond))
				if err != nil {
					return nil, err
				}
				var ms []jetstream.Msg
				for m := range fetched.Messages() {
					ms = append(ms, m)
				}
				return ms, nil
			}
			if extra.parts > 0 {
				in := make(chan jetstream.Msg, b.N)
				for _, c := range conss {
					cc, err := c.Consume(func(m jetstream.Msg) { in <- m }, jetstream.PullMaxMessages(layoutBatch))
					require.NoError(b, err)
					context.AfterFunc(wctx, cc.Stop)
				}
				fetch = func(ctx context.Context) ([]jetstream.Msg, error) {
					var ms []jetstream.Msg
					select {
					case m := <-in:
						ms = append(ms, m)
					case <-ctx.Done():
						return nil, nil
					}
					for len(ms) < layoutBatch && len(in) > 0 {
						ms = append(ms, <-in)
					}
					return ms, nil
				}
			}
			start(func(ctx context.Context) error {
				for ctx.Err() == nil {
					fetched, err := fetch(ctx)
					if err != nil {
						return err
					}
					var batch []layoutMsg
					for _, m := range fetched {
						md, err := m.Metadata()
						if err != nil {
							return err
						}
						batch = append(batch, layoutMsg{id: lastToken(m.Subject()), seq: md.Sequence.Stream})
					}
					if len(batch) == 0 {
						continue
					}
					if err := lw.deliver(ctx, batch); err != nil {
						return err
					}
					// Removal: each message acknowledged once the commit
					// covering it was accepted.
					for _, m := range fetched {
						if err := m.Ack(); err != nil {
							return err
						}
					}
					deliveredN(len(batch))
				}
				return nil
			})
		}
	}

	pjs, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	require.NoError(b, err)
	body := make([]byte, 128)
	b.ReportAllocs()
	cpu := testutil.ProcessCPU()
	b.ResetTimer()
	for i := range b.N {
		_, err := pjs.PublishAsync("m."+strconv.Itoa(i%layoutIDs), body, jetstream.WithStallWait(time.Minute))
		require.NoError(b, err)
	}
	select {
	case <-done:
	case <-ctx.Done():
		b.Fatalf("%d of %d delivered", delivered.Load(), b.N)
	}
	if layout != "raw" {
		// Every message left the mailbox (each only after its commit),
		// the last acknowledgements' removals counted in the CPU too.
		st, err := js.Stream(ctx, "M")
		require.NoError(b, err)
		testutil.WaitFor(b, time.Minute, "every message removed", func() bool {
			info, err := st.Info(ctx)
			return err == nil && info.State.Msgs == 0
		})
	}
	b.StopTimer()
	b.ReportMetric(float64((testutil.ProcessCPU()-cpu).Microseconds())/float64(b.N), "cpu-us/op")
	stopWorkers()
	wg.Wait()
}

// layoutMsg is a message of an id with its stored sequence.
type layoutMsg struct {
	id   string
	seq  uint64
	subj string // the stored subject (sweep)
}

// partition is the partition token of the stored subject, p.<k>.<id>.
func (m layoutMsg) partition() string {
	_, rest, _ := strings.Cut(m.subj, ".")
	q, _, _ := strings.Cut(rest, ".")
	return q
}

func republishedMsg(m *nats.Msg) layoutMsg {
	seq, _ := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
	return layoutMsg{id: lastToken(m.Subject), seq: seq, subj: m.Header.Get(jetstream.SubjectHeader)}
}

// layoutSweep removes a worker's committed messages on the sweep layout:
// every 20 ms, one purge of each partition it serves below the first
// message of it not committed yet. Its partitions' posts reach it alone and
// in stream order, and each batch is committed before the next is taken,
// so everything of a partition below the mark is committed.
type layoutSweep struct {
	nc    *nats.Conn
	mu    sync.Mutex
	marks map[string]uint64 // partition filter -> first sequence not committed
	swept map[string]uint64 // partition filter -> the mark of its last purge
}

// committed moves the marks of the partitions of a committed batch.
func (sw *layoutSweep) committed(batch []layoutMsg) {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	for _, m := range batch {
		f := "p." + m.partition() + ".*"
		sw.marks[f] = max(sw.marks[f], m.seq+1)
	}
}

func (sw *layoutSweep) run(ctx context.Context) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		sw.mu.Lock()
		due := map[string]uint64{}
		for f, mark := range sw.marks {
			if mark > sw.swept[f] {
				due[f] = mark
				sw.swept[f] = mark
			}
		}
		sw.mu.Unlock()
		for f, mark := range due {
			if err := jsapi.Purge(ctx, sw.nc, "M", f, mark); err != nil && ctx.Err() == nil {
				return err
			}
		}
	}
}

func lastToken(s string) string {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '.' {
			return s[i+1:]
		}
	}
	return s
}

// layoutWorker holds ids: the revision of each one's record.
type layoutWorker struct {
	nc    *nats.Conn
	js    jetstream.JetStream
	held  map[string]string
	check bool // check the records of held ids before each batch (the watch is apart: watch)
}

func newLayoutWorker(nc *nats.Conn, js jetstream.JetStream, check bool) *layoutWorker {
	return &layoutWorker{nc: nc, js: js, held: map[string]string{}, check: check}
}

// watch follows every record written from now on, as a worker's
// ownership watch does, until ctx ends.
func (lw *layoutWorker) watch(b *testing.B, ctx context.Context) {
	st, err := lw.js.Stream(ctx, "B")
	require.NoError(b, err)
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{"r.*"}, DeliverPolicy: jetstream.DeliverNewPolicy})
	require.NoError(b, err)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		if _, err := m.Metadata(); err != nil {
			b.Error(err)
		}
	})
	require.NoError(b, err)
	context.AfterFunc(ctx, cc.Stop)
}

// deliver claims the batch's ids not held yet and reads their cursors,
// then (check) reads the records of the ids it held already, then
// commits each message's cursor fenced by its id's record, and returns
// once every commit was accepted.
func (lw *layoutWorker) deliver(ctx context.Context, batch []layoutMsg) error {
	var claims []jetstream.PubAckFuture
	var claimed, cursors, records []string
	asked := map[string]bool{}
	for _, m := range batch {
		if asked[m.id] {
			continue
		}
		asked[m.id] = true
		if _, ok := lw.held[m.id]; ok {
			records = append(records, "r."+m.id)
			continue
		}
		msg := nats.NewMsg("r." + m.id)
		msg.Data = []byte(`{"node":"w","epoch":1}`)
		msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
		f, err := lw.js.PublishMsgAsync(msg, jetstream.WithStallWait(time.Minute))
		if err != nil {
			return err
		}
		claims = append(claims, f)
		claimed = append(claimed, m.id)
		cursors = append(cursors, "c."+m.id)
	}
	for i, f := range claims {
		a, err := layoutWait(ctx, f)
		if err != nil {
			return err
		}
		lw.held[claimed[i]] = strconv.FormatUint(a.Sequence, 10)
	}
	if !lw.check {
		records = nil
	}
	for _, subjects := range [][]string{cursors, records} {
		for len(subjects) > 0 {
			n := min(len(subjects), jsapi.MaxMultiLast)
			if _, err := jsapi.DirectGet(ctx, lw.nc, "B", jsapi.GetRequest{MultiLast: subjects[:n]}); err != nil {
				return err
			}
			subjects = subjects[n:]
		}
	}
	keys := make([]string, len(batch))
	seqs := make([]uint64, len(batch))
	for i, m := range batch {
		keys[i], seqs[i] = m.id, m.seq
	}
	return lw.commit(ctx, keys, seqs)
}

// commit writes each cursor c.<key> = seq, fenced by its record r.<key>
// as held here, all in flight, and returns once every commit was
// accepted.
func (lw *layoutWorker) commit(ctx context.Context, keys []string, seqs []uint64) error {
	commits := make([]jetstream.PubAckFuture, 0, len(keys))
	for i, key := range keys {
		msg := nats.NewMsg("c." + key)
		msg.Data = []byte(`{"seq":` + strconv.FormatUint(seqs[i], 10) + `}`)
		msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, lw.held[key])
		msg.Header.Set(jetstream.ExpectedLastSubjSeqSubjHeader, "r."+key)
		f, err := lw.js.PublishMsgAsync(msg, jetstream.WithStallWait(time.Minute))
		if err != nil {
			return err
		}
		commits = append(commits, f)
	}
	for _, f := range commits {
		if _, err := layoutWait(ctx, f); err != nil {
			return err
		}
	}
	return nil
}

// claimPartitions claims the partitions qs: a record r.p<q> each,
// conditional on there being none (the partown layout).
func (lw *layoutWorker) claimPartitions(ctx context.Context, qs []int) error {
	for _, q := range qs {
		msg := nats.NewMsg("r.p" + strconv.Itoa(q))
		msg.Data = []byte(`{"node":"w","epoch":1}`)
		msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
		a, err := lw.js.PublishMsg(ctx, msg)
		if err != nil {
			return err
		}
		lw.held["p"+strconv.Itoa(q)] = strconv.FormatUint(a.Sequence, 10)
	}
	return nil
}

// deliverPartitions is deliver for the partown layout: (check) one read of
// the batch's partitions' records, then for each partition of the batch
// one commit of its cursor c.p<q>, the batch's last message of it, fenced
// by the partition's record (commit). A partition's posts reach its one
// holder in stream order, so its cursor covers every message of it up to
// there.
func (lw *layoutWorker) deliverPartitions(ctx context.Context, batch []layoutMsg) error {
	last := map[string]uint64{} // p<q> -> the batch's last message of it
	for _, m := range batch {
		p := "p" + m.partition()
		last[p] = max(last[p], m.seq)
	}
	if lw.check {
		records := make([]string, 0, len(last))
		for p := range last {
			records = append(records, "r."+p)
		}
		if _, err := jsapi.DirectGet(ctx, lw.nc, "B", jsapi.GetRequest{MultiLast: records}); err != nil {
			return err
		}
	}
	keys := make([]string, 0, len(last))
	seqs := make([]uint64, 0, len(last))
	for p, seq := range last {
		keys, seqs = append(keys, p), append(seqs, seq)
	}
	return lw.commit(ctx, keys, seqs)
}

// purge removes each message of the batch by a purge of its id's subject
// below the next sequence, 64 at once.
func (lw *layoutWorker) purge(ctx context.Context, batch []layoutMsg) error {
	work := make(chan layoutMsg)
	var first error
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for m := range work {
				if err := jsapi.Purge(ctx, lw.nc, "M", "m."+m.id, m.seq+1); err != nil {
					mu.Lock()
					first = cmp.Or(first, err)
					mu.Unlock()
				}
			}
		})
	}
	for _, m := range batch {
		work <- m
	}
	close(work)
	wg.Wait()
	return first
}

func layoutWait(ctx context.Context, f jetstream.PubAckFuture) (*jetstream.PubAck, error) {
	select {
	case a := <-f.Ok():
		return a, nil
	case err := <-f.Err():
		return nil, err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
