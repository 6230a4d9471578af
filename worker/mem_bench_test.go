package worker_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/worker"
	"github.com/fencepost/fencepost/world"
)

// BenchmarkHeldIDMemory measures what a worker keeps per id it holds: one
// worker claims N ids with one message each (FENCEPOST_HELD_IDS, default
// 20,000), delivers them and keeps holding them (Idle is long) until every
// holding has parked (park.go); the process's heap and goroutine stacks
// then, less the same after the worker stopped (the embedded server's
// records, cursors and messages stay), per id. b.N is not used: one
// measurement per run. Before parking: 4.7 KB of heap, 8.1 KB of stack
// and a goroutine per held id.
//
//	go test -run '^$' -bench HeldIDMemory -benchtime 1x ./worker/
func BenchmarkHeldIDMemory(b *testing.B) {
	n := 20000
	if v, err := strconv.Atoi(os.Getenv("FENCEPOST_HELD_IDS")); err == nil && v > 0 {
		n = v
	}
	env := testutil.Start(b, testutil.Targets()[0])
	w := env.World(b, world.Config{})
	ctx := testutil.Ctx(b, 10*time.Minute)
	for i := range n {
		p, err := w.Queue.SendAsync(fmt.Sprint("id-", i), []byte("x"))
		require.NoError(b, err)
		if i%1000 == 999 || i == n-1 {
			_, err = p.Wait(ctx)
			require.NoError(b, err)
		}
	}
	var delivered atomic.Int64
	wk, err := w.NewWorker(worker.Config{Node: "m1", TTL: 10 * time.Second, Idle: time.Hour}, func(context.Context, drain.Message) error {
		delivered.Add(1)
		return nil
	})
	require.NoError(b, err)
	b.ResetTimer()
	for range b.N {
		rctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- wk.Run(rctx) }()
		testutil.WaitFor(b, 5*time.Minute, "every id delivered and held, and parked", func() bool {
			return delivered.Load() >= int64(n) && len(wk.Held()) == n && worker.Serving(wk) == 0
		})
		held := memNow()
		goroutines := runtime.NumGoroutine()
		stop()
		require.NoError(b, <-done) // every holding ended
		after := memNow()
		b.ReportMetric((float64(held.heap)-float64(after.heap))/float64(n), "heap-B/id")
		b.ReportMetric((float64(held.stack)-float64(after.stack))/float64(n), "stack-B/id")
		b.ReportMetric(float64(goroutines-runtime.NumGoroutine())/float64(n), "goroutines/id")
		delivered.Store(0)
		break // the ids were released at stop: one measurement
	}
}

type mem struct{ heap, stack uint64 }

// memNow is the live heap and the goroutine stacks in use, after a
// collection.
func memNow() mem {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return mem{heap: ms.HeapAlloc, stack: ms.StackInuse}
}
