package shard_test

import (
	"context"
	"fmt"
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
