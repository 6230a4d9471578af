package world_test

import (
	"context"
	"errors"
	"strconv"
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

// BenchmarkFanInFloor measures the process CPU (an in-process server and
// its clients) of each broker request a fan-in message costs, one request
// shape per sub-benchmark, over 10,000 ids, with none of fencepost's code
// (docs/experiments/fan-in-floor.md):
//
//   - post: an asynchronous publish to the id's subject (both sides);
//   - post+republish: the same on a stream that republishes every message
//     to a core subject, read by one subscriber (a worker's feed);
//   - consume: a pull consumer of every subject, batches of 1,000, one
//     acknowledgement per batch (raw's read);
//   - consume+ack-each/work-queue: for comparison, the same read of a
//     work-queue stream acknowledging each message, which removes it;
//   - fenced-write: an asynchronous write to the id's cursor subject,
//     conditional on the last sequence of its record's subject (a commit;
//     a claim and a release are the same request shape);
//   - purge: a purge of one subject holding one message (a holding's);
//   - delete: for comparison, a delete of one message by its sequence;
//   - read-last: a direct get of a subject's last message (a cursor read).
//
// cpu-us/op is the figure; ns/op is the wall time of one op, with many in
// flight, or one at a time for the requests a worker makes one at a time
// (purges, reads). Run it as
//
//	go test -run '^$' -bench FanInFloor -benchtime 20000x -count 3 ./world/
func BenchmarkFanInFloor(b *testing.B) {
	const ids = 10000
	body := []byte("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef") // 128 bytes, as the bench's
	subj := func(i int) string { return "s." + strconv.Itoa(i%ids) }
	setup := func(b *testing.B, cfg jetstream.StreamConfig) (context.Context, *nats.Conn, jetstream.JetStream, jetstream.Stream) {
		srv := servertest.New(b)
		nc, js := servertest.Connect(b, srv.ClientURL())
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		b.Cleanup(cancel)
		cfg.Name, cfg.Subjects, cfg.Storage = "S", []string{"s.*"}, jetstream.FileStorage
		st, err := js.CreateStream(ctx, cfg)
		require.NoError(b, err)
		return ctx, nc, js, st
	}
	settle := func(b *testing.B, ctx context.Context, js jetstream.JetStream) {
		select {
		case <-js.PublishAsyncComplete():
		case <-ctx.Done():
			b.Fatal("publishes not acknowledged")
		}
	}
	publishAll := func(b *testing.B, js jetstream.JetStream, n int) {
		for i := range n {
			_, err := js.PublishAsync(subj(i), body)
			require.NoError(b, err)
		}
	}
	// measure runs op b.N times and reports its process CPU per op.
	measure := func(b *testing.B, op func()) {
		b.ReportAllocs()
		cpu := testutil.ProcessCPU()
		b.ResetTimer()
		op()
		b.StopTimer()
		b.ReportMetric(float64((testutil.ProcessCPU()-cpu).Microseconds())/float64(b.N), "cpu-us/op")
	}

	b.Run("post", func(b *testing.B) {
		ctx, _, js, _ := setup(b, jetstream.StreamConfig{})
		measure(b, func() { publishAll(b, js, b.N); settle(b, ctx, js) })
	})
	b.Run("post+republish", func(b *testing.B) {
		ctx, nc, js, _ := setup(b, jetstream.StreamConfig{RePublish: &jetstream.RePublish{Source: "s.*", Destination: "rp.{{wildcard(1)}}"}})
		var got atomic.Int64
		sub, err := nc.Subscribe("rp.*", func(*nats.Msg) { got.Add(1) })
		require.NoError(b, err)
		require.NoError(b, sub.SetPendingLimits(-1, -1))
		require.NoError(b, nc.Flush())
		measure(b, func() {
			publishAll(b, js, b.N)
			settle(b, ctx, js)
			testutil.WaitFor(b, time.Minute, "every republished message received", func() bool { return got.Load() >= int64(b.N) })
		})
	})
	b.Run("consume", func(b *testing.B) {
		ctx, _, js, st := setup(b, jetstream.StreamConfig{})
		publishAll(b, js, b.N)
		settle(b, ctx, js)
		cons, err := st.CreateConsumer(ctx, jetstream.ConsumerConfig{AckPolicy: jetstream.AckAllPolicy, MaxAckPending: -1})
		require.NoError(b, err)
		measure(b, func() {
			for n := 0; n < b.N; {
				batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(time.Second))
				require.NoError(b, err)
				var last jetstream.Msg
				for m := range batch.Messages() {
					last = m
					n++
				}
				require.NoError(b, batch.Error())
				require.NotNil(b, last)
				require.NoError(b, last.Ack())
			}
		})
	})
	b.Run("consume+ack-each/work-queue", func(b *testing.B) {
		ctx, _, js, st := setup(b, jetstream.StreamConfig{Retention: jetstream.WorkQueuePolicy})
		publishAll(b, js, b.N)
		settle(b, ctx, js)
		cons, err := st.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: -1})
		require.NoError(b, err)
		measure(b, func() {
			for n := 0; n < b.N; {
				batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(time.Second))
				require.NoError(b, err)
				for m := range batch.Messages() {
					require.NoError(b, m.Ack())
					n++
				}
				require.NoError(b, batch.Error())
			}
			testutil.WaitFor(b, time.Minute, "every message removed by its acknowledgement", func() bool {
				info, err := st.Info(ctx)
				return err == nil && info.State.Msgs == 0
			})
		})
	})
	b.Run("fenced-write", func(b *testing.B) {
		ctx, _, js, _ := setup(b, jetstream.StreamConfig{})
		// A bucket-like stream: the records c.<id>'s writes are
		// conditional on, one each.
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "B", Subjects: []string{"o.*", "c.*"}, MaxMsgsPerSubject: 1, Storage: jetstream.FileStorage})
		require.NoError(b, err)
		revs := make([]string, ids)
		for i := range ids {
			a, err := js.Publish(ctx, "o."+strconv.Itoa(i), []byte(`{"v":1}`))
			require.NoError(b, err)
			revs[i] = strconv.FormatUint(a.Sequence, 10)
		}
		measure(b, func() {
			for i := range b.N {
				id := strconv.Itoa(i % ids)
				m := nats.NewMsg("c." + id)
				m.Data = []byte(`{"v":1,"seq":` + strconv.Itoa(i) + `}`)
				m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, revs[i%ids])
				m.Header.Set(jetstream.ExpectedLastSubjSeqSubjHeader, "o."+id)
				_, err := js.PublishMsgAsync(m)
				require.NoError(b, err)
			}
			settle(b, ctx, js)
		})
	})
	// The worker's purges and cursor reads are requests, each waited for;
	// many holdings make them at once: par goroutines, each one request
	// at a time.
	for _, par := range []int{1, 64} {
		b.Run("purge/at-once="+strconv.Itoa(par), func(b *testing.B) {
			ctx, nc, js, st := setup(b, jetstream.StreamConfig{})
			// b.N subjects of one message each.
			for i := range b.N {
				_, err := js.PublishAsync("s."+strconv.Itoa(i), body)
				require.NoError(b, err)
			}
			settle(b, ctx, js)
			measure(b, func() {
				inParallel(b, par, func(i int) error { return jsapi.Purge(ctx, nc, "S", "s."+strconv.Itoa(i), uint64(b.N)+1) })
			})
			info, err := st.Info(ctx)
			require.NoError(b, err)
			require.Zero(b, info.State.Msgs, "every message purged")
		})
		b.Run("delete/at-once="+strconv.Itoa(par), func(b *testing.B) {
			ctx, _, js, st := setup(b, jetstream.StreamConfig{})
			publishAll(b, js, b.N)
			settle(b, ctx, js)
			measure(b, func() {
				inParallel(b, par, func(i int) error { return st.DeleteMsg(ctx, uint64(i)+1) })
			})
			info, err := st.Info(ctx)
			require.NoError(b, err)
			require.Zero(b, info.State.Msgs, "every message deleted")
		})
		b.Run("read-last/at-once="+strconv.Itoa(par), func(b *testing.B) {
			ctx, nc, js, _ := setup(b, jetstream.StreamConfig{AllowDirect: true})
			publishAll(b, js, ids)
			settle(b, ctx, js)
			measure(b, func() {
				inParallel(b, par, func(i int) error {
					m, err := jsapi.DirectLast(ctx, nc, "S", subj(i))
					if err == nil && m == nil {
						err = errors.New("no message")
					}
					return err
				})
			})
		})
	}
}

// inParallel runs op(0..b.N-1) in par goroutines, each one op at a time.
func inParallel(b *testing.B, par int, op func(i int) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, par)
	for range par {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < b.N; i = int(next.Add(1) - 1) {
				if err := op(i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}
