package shard_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// BenchmarkShardSteady is steady delivery on a sharded world in one
// process with its embedded server: 8 ids, one worker, every message
// posted asynchronously and delivered; beside it the same posts read by
// one raw JetStream consumer with an ack per batch (raw), in the same
// run. cpu-us/op is the process's CPU (server, producer and worker) per
// message; compare ours with raw's.
//
//	go test -run '^$' -bench ShardSteady -benchtime 50000x ./shard/
func BenchmarkShardSteady(b *testing.B) {
	b.Run("raw", func(b *testing.B) { benchSteady(b, true) })
	b.Run("shards=16", func(b *testing.B) { benchSteady(b, false) })
}

func benchSteady(b *testing.B, raw bool) {
	env := testutil.Start(b, testutil.Targets()[0])
	w := env.World(b, world.Config{Shards: 16})
	ctx := testutil.Ctx(b, 10*time.Minute)
	var delivered atomic.Int64
	if raw {
		js := env.Client.JetStream()
		s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "RAW", Subjects: []string{"raw.*"}})
		require.NoError(b, err)
		cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
		require.NoError(b, err)
		cc, err := cons.Consume(func(m jetstream.Msg) { delivered.Add(1) })
		require.NoError(b, err)
		defer cc.Stop()
	} else {
		pool(b, w, 1, 10*time.Second, func(context.Context, drain.Message) error { delivered.Add(1); return nil })
	}
	ids := make([]string, 8)
	for i := range ids {
		ids[i] = fmt.Sprint("id-", i)
	}
	post := func(i int) {
		if raw {
			_, err := env.Client.JetStream().PublishAsync("raw."+ids[i%8], []byte("0123456789abcdef"))
			require.NoError(b, err)
			return
		}
		_, err := w.Queue.SendAsync(ids[i%8], []byte("0123456789abcdef"))
		require.NoError(b, err)
	}
	cpu0 := testutil.ProcessCPU()
	b.ResetTimer()
	for i := range b.N {
		post(i)
		if i%256 == 255 {
			for delivered.Load() < int64(i-2048) {
				time.Sleep(50 * time.Microsecond)
			}
		}
	}
	testutil.WaitFor(b, 2*time.Minute, "every message delivered", func() bool { return delivered.Load() >= int64(b.N) })
	b.StopTimer()
	b.ReportMetric(float64((testutil.ProcessCPU()-cpu0).Microseconds())/float64(b.N), "cpu-us/op")
}

// BenchmarkShardCount is what the number of shards costs: 4 workers
// deliver posts to 100,000 ids drawn from a Zipf distribution (s = 1.1),
// on worlds of 4, 16 and 64 shards. Each held shard reads its mail with a
// filtered consumer of its own, and the server visits each stored message
// once for every consumer that passes over it: cpu-us/op (the process's
// CPU, server included, per message) grows with the shards past a few per
// node (docs/design.md 3.14).
//
//	go test -run '^$' -bench ShardCount -benchtime 60000x ./shard/
func BenchmarkShardCount(b *testing.B) {
	for _, n := range []int{4, 16, 64} {
		b.Run(fmt.Sprint("shards=", n), func(b *testing.B) {
			env := testutil.Start(b, testutil.Targets()[0])
			w := env.World(b, world.Config{Shards: n})
			ctx := testutil.Ctx(b, 10*time.Minute)
			var got atomic.Int64
			pool(b, w, 4, 10*time.Second, func(context.Context, drain.Message) error { got.Add(1); return nil })
			testutil.WaitFor(b, time.Minute, "every shard held", func() bool {
				st, err := w.Mailboxes.WorldStat(ctx)
				return err == nil && st.Owned == n
			})
			z := rand.NewZipf(rand.New(rand.NewPCG(1, 2)), 1.1, 1, 99_999)
			cpu0 := testutil.ProcessCPU()
			b.ResetTimer()
			for i := range b.N {
				p, err := w.Queue.SendAsync(fmt.Sprint("id-", z.Uint64()), []byte("0123456789abcdef"))
				require.NoError(b, err)
				if i%500 == 499 {
					_, err = p.Wait(ctx)
					require.NoError(b, err)
				}
			}
			testutil.WaitFor(b, time.Minute, "every message delivered", func() bool { return got.Load() >= int64(b.N) })
			b.StopTimer()
			b.ReportMetric(float64((testutil.ProcessCPU()-cpu0).Microseconds())/float64(b.N), "cpu-us/op")
		})
	}
}
