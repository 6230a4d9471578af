package drain_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/server/servertest"
	"github.com/fencepost/fencepost/world"
)

// benchEnv is one server with a world and a raw stream for the baseline.
type benchEnv struct {
	ctx context.Context
	js  jetstream.JetStream
	w   *client.World
	raw jetstream.Stream
}

func newBenchEnv(b *testing.B) *benchEnv {
	srv := servertest.New(b)
	c, err := client.Connect(srv.ClientURL(), client.WithTimeout(30*time.Second))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	ctx := context.Background()
	w, err := c.CreateWorld(ctx, "bench", world.Config{MaxMsgSize: 4096})
	if err != nil {
		b.Fatal(err)
	}
	js := c.JetStream()
	raw, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "RAW", Subjects: []string{"raw.>"}})
	if err != nil {
		b.Fatal(err)
	}
	return &benchEnv{ctx: ctx, js: js, w: w, raw: raw}
}

// fill posts n 128-byte messages, spread over subjects by subj(i), with
// 256 asynchronous publishes in flight.
func (e *benchEnv) fill(b *testing.B, n int, subj func(i int) string) {
	body := make([]byte, 128)
	fs := make([]jetstream.PubAckFuture, 0, 256)
	for i := 0; i < n; i += 256 {
		fs = fs[:0]
		for j := i; j < min(i+256, n); j++ {
			f, err := e.js.PublishAsync(subj(j), body)
			if err != nil {
				b.Fatal(err)
			}
			fs = append(fs, f)
		}
		for _, f := range fs {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				b.Fatal(err)
			}
		}
	}
}

// rawConsume is the baseline: a pull consumer over filter that fetches
// batches of 1,000 and acknowledges each batch once (AckAll on its last
// message), until n messages were consumed.
func (e *benchEnv) rawConsume(b *testing.B, filter string, n int) time.Duration {
	start := time.Now()
	cons, err := e.raw.CreateConsumer(e.ctx, jetstream.ConsumerConfig{FilterSubject: filter, AckPolicy: jetstream.AckAllPolicy, MaxAckPending: -1})
	if err != nil {
		b.Fatal(err)
	}
	got := 0
	for got < n {
		batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			b.Fatal(err)
		}
		var last jetstream.Msg
		for m := range batch.Messages() {
			last = m
			got++
		}
		if batch.Error() != nil {
			b.Fatal(batch.Error())
		}
		if last != nil {
			if err := last.Ack(); err != nil {
				b.Fatal(err)
			}
		}
	}
	d := time.Since(start)
	if err := e.raw.DeleteConsumer(e.ctx, cons.CachedInfo().Name); err != nil {
		b.Fatal(err)
	}
	return d
}

func report(b *testing.B, n int, raw, ours time.Duration) {
	rawRate, oursRate := float64(n)/raw.Seconds(), float64(n)/ours.Seconds()
	b.ReportMetric(rawRate, "raw-msgs/s")
	b.ReportMetric(oursRate, "fp-msgs/s")
	b.ReportMetric(oursRate/rawRate, "ratio")
}

// BenchmarkDrainHotID drains b.N messages of one id against a raw pull
// consumer fetching 1,000 at a time with one ack per batch, on the same
// server in the same run. The two alternate in five rounds of b.N/5
// messages, so that both see the same machine state.
//
//	go test -run '^$' -bench DrainHotID -benchtime 100000x ./drain/
func BenchmarkDrainHotID(b *testing.B) {
	e := newBenchEnv(b)
	lease, err := e.w.Ownership.Claim(e.ctx, "hot", "node-a", time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	const rounds = 5
	var rawD, oursD time.Duration
	b.ResetTimer()
	for round := range rounds {
		n := b.N/rounds + boolInt(round < b.N%rounds)
		b.StopTimer()
		e.fill(b, n, func(int) string { return "raw.hot" })
		e.fill(b, n, func(int) string { return wire.MailboxSubject("bench", "hot") })
		rawD += e.rawConsume(b, "raw.hot", n)
		b.StartTimer()
		start := time.Now()
		res, err := e.w.Drainer.DrainLease(e.ctx, lease, func(context.Context, drain.Message) error { return nil })
		oursD += time.Since(start)
		if err != nil || res.Count != n {
			b.Fatalf("drained %d of %d: %v", res.Count, n, err)
		}
	}
	report(b, b.N, rawD, oursD)
}

func boolInt(v bool) int {
	if v {
		return 1
	}
	return 0
}

// BenchmarkDrainManyIDsHeld drains 100,000 messages spread over 10,000
// ids (10 each) on a worker's path (docs/design.md 3.10): the ids are held
// through one session and caught up (a drain each, before the timer); one
// ordered consumer reads every mailbox and hands each id's messages to
// its holding's Deliver, at most 256 deliveries at once, and tells the
// drainer's Sweeper of each, as a worker does (the holdings leave their
// purges to its sweeps, one purge a second for every id); the timer stops
// once every commit settled. Raw: a pull consumer over the same spread of
// subjects, on the same server in the same run.
//
//	go test -run '^$' -bench DrainManyIDsHeld -benchtime 1x -count 3 ./drain/
func BenchmarkDrainManyIDsHeld(b *testing.B) {
	const ids, per, parallel = 10_000, 10, 256
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		e := newBenchEnv(b)
		ss, err := e.w.Ownership.OpenSession(e.ctx, "node-a", time.Hour)
		if err != nil {
			b.Fatal(err)
		}
		names := make([]string, ids)
		holdings := map[string]*drain.Holding{}
		for j := range names {
			names[j] = fmt.Sprintf("id-%d", j)
			l, err := ss.Claim(e.ctx, names[j])
			if err != nil {
				b.Fatal(err)
			}
			h, err := e.w.Drainer.Hold(l)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := h.Drain(e.ctx, func(context.Context, drain.Message) error { return nil }); err != nil {
				b.Fatal(err)
			}
			holdings[names[j]] = h
		}
		m, err := e.js.CreateStream(e.ctx, jetstream.StreamConfig{Name: "RAWM", Subjects: []string{"rawm.*"}})
		if err != nil {
			b.Fatal(err)
		}
		e.raw = m
		sw := e.w.Drainer.NewSweeper()
		swctx, stopSweep := context.WithCancel(e.ctx)
		swept := make(chan error, 1)
		go func() { swept <- sw.Run(swctx, time.Second) }()
		e.fill(b, ids*per, func(i int) string { return wire.MailboxSubject("bench", names[i%ids]) })
		e.fill(b, ids*per, func(i int) string { return fmt.Sprintf("rawm.%d", i%ids) })
		rawD := e.rawConsume(b, "", ids*per)
		b.StartTimer()
		start := time.Now()
		delivered := deliverHeld(b, e, holdings, sw, ids*per, parallel)
		oursD := time.Since(start)
		if delivered != ids*per {
			b.Fatalf("delivered %d of %d", delivered, ids*per)
		}
		report(b, ids*per, rawD, oursD)
		b.StopTimer()
		stopSweep()
		if err := <-swept; err != nil && swctx.Err() == nil {
			b.Fatal(err)
		}
		ss.Orphan()
	}
}

// deliverHeld reads n mailbox messages with one ordered consumer and hands
// each id's to its holding (a goroutine per id, at most parallel
// deliveries at once) and each message to sw, then settles every commit;
// it returns how many messages the handlers got.
func deliverHeld(b *testing.B, e *benchEnv, holdings map[string]*drain.Holding, sw *drain.Sweeper, n, parallel int) int {
	cons, err := handles.Of(e.w).Mailbox.OrderedConsumer(e.ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{wire.MailboxFilter("bench")}})
	if err != nil {
		b.Fatal(err)
	}
	it, err := cons.Messages()
	if err != nil {
		b.Fatal(err)
	}
	defer it.Stop()
	var got atomic.Int64
	hd := func(context.Context, drain.Message) error { got.Add(1); return nil }
	slots := make(chan struct{}, parallel)
	inbox := map[string]chan *jetstream.RawStreamMsg{}
	var wg sync.WaitGroup
	var failed atomic.Value
	for id, h := range holdings {
		ch := make(chan *jetstream.RawStreamMsg, 64)
		inbox[id] = ch
		wg.Go(func() {
			for m := range ch {
				msgs := []*jetstream.RawStreamMsg{m}
				for more := true; more; {
					select {
					case m, ok := <-ch:
						if !ok {
							more = false
							break
						}
						msgs = append(msgs, m)
					default:
						more = false
					}
				}
				slots <- struct{}{}
				_, ok, err := h.Deliver(e.ctx, msgs, hd)
				<-slots
				if err != nil || !ok {
					failed.Store(fmt.Errorf("deliver %s: ok=%v %v", id, ok, err))
				}
			}
			if err := h.Flush(e.ctx); err != nil {
				failed.Store(err)
			}
		})
	}
	for range n {
		m, err := it.Next()
		if err != nil {
			b.Fatal(err)
		}
		meta, err := m.Metadata()
		if err != nil {
			b.Fatal(err)
		}
		id, err := wire.MailboxID("bench", m.Subject())
		if err != nil {
			b.Fatal(err)
		}
		sw.SawID(meta.Sequence.Stream, id)
		inbox[id] <- &jetstream.RawStreamMsg{Subject: m.Subject(), Sequence: meta.Sequence.Stream, Header: m.Headers(), Data: m.Data(), Time: meta.Timestamp}
	}
	for _, ch := range inbox {
		close(ch)
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	return int(got.Load())
}
