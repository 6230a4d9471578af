package worker_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/worker"
	"github.com/fencepost/fencepost/world"
)

// BenchmarkWorkerFanIn is the bench's fan-in on a worker's delivery path,
// in one process with the embedded server: 2 workers serve 2,000 ids; each
// op is one message, posted round by round (one to every id per round) and
// delivered. The ids are claimed and the workers warmed by one round
// before the timer. allocs/op and the CPU profile are of the whole process
// (server, producer and workers): the server's and the producer's share
// is the same on every path of the workers, so a change of the workers
// shows in them. cpu-us/op is the process's CPU time (user and system)
// per message. parts=0 is a world without partitions (one consumer per
// worker, a sweep), parts=64 the default of fencepost world add on one
// replica (republished posts by partition, and each id purges its own).
// shards=N is a sharded world (package shard: a holder per shard, one
// fenced cursor per shard, removal by one purge of the shard).
//
// Its rounds (about 0.2 s) are shorter than a holding's purge delay, so on
// parts=64 each purge covers an id's messages of two or three rounds and
// the server walks every message between them; the bench's fan-in rounds
// (10,000 ids, about 1 s) are longer, and each of its purges removes one
// message. So the purges weigh more here than there (docs/experiments/global-sweep.md,
// "What a purge of one subject costs the server"): a change to them is
// measured in the bench, not here alone. cpu-us/op stops at the last
// delivery; cpu-us/op-removed at the moment the mailboxes were empty
// (reportRemoval), so that a change that removes later is not taken for
// one that removes cheaper.
//
//	go test -run '^$' -bench WorkerFanIn -benchmem -benchtime 20000x ./worker/
func BenchmarkWorkerFanIn(b *testing.B) {
	for _, parts := range []int{0, 64} {
		b.Run(fmt.Sprint("parts=", parts), func(b *testing.B) { benchFanIn(b, world.Config{Partitions: parts}) })
	}
	for _, shards := range []int{4, 16} {
		b.Run(fmt.Sprint("shards=", shards), func(b *testing.B) { benchFanIn(b, world.Config{Shards: shards}) })
	}
}

func benchFanIn(b *testing.B, cfg world.Config) {
	const ids, workers = 2000, 2
	w, ctx, delivered, stop := startPool(b, cfg, workers)
	defer stop()
	names := make([]string, ids)
	for i := range names {
		names[i] = fmt.Sprint("id-", i)
	}
	post := func(n int) {
		for i := range n {
			p, err := w.Queue.SendAsync(names[i%ids], []byte("0123456789abcdef"))
			require.NoError(b, err)
			if i%500 == 499 || i == n-1 {
				_, err = p.Wait(ctx)
				require.NoError(b, err)
			}
		}
	}
	post(ids) // warm-up: every id claimed
	testutil.WaitFor(b, 2*time.Minute, "the warm-up round delivered", func() bool { return delivered.Load() >= ids })
	delivered.Store(0)
	cpu0 := testutil.ProcessCPU()
	b.ResetTimer()
	for sent := 0; sent < b.N; {
		n := min(ids, b.N-sent)
		post(n)
		sent += n
		testutil.WaitFor(b, 2*time.Minute, "the round delivered", func() bool { return delivered.Load() >= int64(sent) })
	}
	b.StopTimer()
	b.ReportMetric(float64((testutil.ProcessCPU()-cpu0).Microseconds())/float64(b.N), "cpu-us/op")
	reportRemoval(b, ctx, w, cpu0)
}

// reportRemoval waits, up to removalWait, for the mailboxes to be empty
// and reports what a delivery-only figure leaves out: stored-at-end, the
// messages still stored when the last was delivered (committed, not yet
// removed); stored-after-wait, those still stored at the end of the wait;
// and cpu-us/op-removed, the process's CPU per message until the
// mailboxes were empty (or the wait ended). A path that removes messages
// later, or not at all, looks cheaper in cpu-us/op alone (docs/experiments/confirmed-sweep.md).
func reportRemoval(b *testing.B, ctx context.Context, w *client.World, cpu0 time.Duration) {
	const removalWait = 20 * time.Second
	stored := func() uint64 {
		info, err := w.World.Inspect(ctx, world.InspectOptions{})
		require.NoError(b, err)
		return info.Mailbox.Msgs
	}
	b.ReportMetric(float64(stored()), "stored-at-end")
	deadline := time.Now().Add(removalWait)
	left := stored()
	for left > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		left = stored()
	}
	b.ReportMetric(float64(left), "stored-after-wait")
	b.ReportMetric(float64((testutil.ProcessCPU()-cpu0).Microseconds())/float64(b.N), "cpu-us/op-removed")
}

// BenchmarkWorkerNewIDs is fan-in's first round on a worker's path: each
// op is one message to an id nobody held before, so each costs a claim
// and the holding's first delivery (a drain) besides the message itself.
// 2 workers on a world of 64 partitions (the default of fencepost world
// add on one replica); the metrics are those of BenchmarkWorkerFanIn.
//
//	go test -run '^$' -bench WorkerNewIDs -benchmem -benchtime 10000x ./worker/
func BenchmarkWorkerNewIDs(b *testing.B) {
	const workers = 2
	w, ctx, delivered, stop := startPool(b, world.Config{Partitions: 64}, workers)
	defer stop()
	round := 0
	post := func(n int) {
		round++
		for i := range n {
			p, err := w.Queue.SendAsync(fmt.Sprintf("r%d-id-%d", round, i), []byte("0123456789abcdef"))
			require.NoError(b, err)
			if i%500 == 499 || i == n-1 {
				_, err = p.Wait(ctx)
				require.NoError(b, err)
			}
		}
	}
	post(200) // warm-up: the workers have listed each other
	testutil.WaitFor(b, 2*time.Minute, "the warm-up round delivered", func() bool { return delivered.Load() >= 200 })
	delivered.Store(0)
	cpu0 := testutil.ProcessCPU()
	b.ResetTimer()
	for sent := 0; sent < b.N; {
		n := min(5000, b.N-sent)
		post(n)
		sent += n
		testutil.WaitFor(b, 2*time.Minute, "the round delivered", func() bool { return delivered.Load() >= int64(sent) })
	}
	b.StopTimer()
	b.ReportMetric(float64((testutil.ProcessCPU()-cpu0).Microseconds())/float64(b.N), "cpu-us/op")
}

// startPool starts a server, a world of cfg and n workers of every id on
// it (their handler counts the deliveries in delivered); stop stops them.
func startPool(b *testing.B, cfg world.Config, n int) (w *client.World, ctx context.Context, delivered *atomic.Int64, stop func()) {
	env := testutil.Start(b, testutil.Targets()[0])
	w = env.World(b, cfg)
	ctx = testutil.Ctx(b, 10*time.Minute)
	delivered = new(atomic.Int64)
	h := func(context.Context, drain.Message) error {
		delivered.Add(1)
		return nil
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, n)
	for i := range n {
		wk, err := w.NewWorker(worker.Config{Node: fmt.Sprint("pool-", i), TTL: 10 * time.Second, Idle: time.Hour, Log: benchLog()}, h)
		require.NoError(b, err)
		go func() { done <- wk.Run(rctx) }()
	}
	return w, ctx, delivered, func() {
		cancel()
		for range n {
			require.NoError(b, <-done)
		}
	}
}

// benchLog is the workers' logger: none, unless FENCEPOST_TEST_LOG is set.
func benchLog() *slog.Logger {
	if os.Getenv("FENCEPOST_TEST_LOG") != "" {
		return slog.Default()
	}
	return slog.New(slog.DiscardHandler)
}
