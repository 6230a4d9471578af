package daemon

import (
	"context"
	"io"
	"log/slog"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestMemLoop_ReturnsIdleHeapAfterABurst: a burst of garbage beside a
// live heap large enough that Go's runtime keeps the burst's memory (it
// stays under twice the live heap); once quiet, memLoop returns it, and
// leaves the live heap alone.
func TestMemLoop_ReturnsIdleHeapAfterABurst(t *testing.T) {
	live := fill(64) // the live heap: the runtime keeps up to about twice it
	burst := fill(48)
	runtime.KeepAlive(burst)
	burst = nil
	runtime.GC()
	before := readHeap()
	require.GreaterOrEqual(t, before.idle(), uint64(32<<20), "the burst's memory is held idle after the collection")

	ctx, cancel := context.WithCancel(context.Background())
	d := &Daemon{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	done := make(chan error, 1)
	go func() { done <- d.memLoop(ctx) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()
	deadline := time.Now().Add(20 * time.Second)
	for {
		h := readHeap()
		// Relative to before: a process that ran other tests first (-count
		// 3) holds idle span space of its own that no collection frees.
		if h.idle()+32<<20 <= before.idle() && h.released >= before.released+32<<20 {
			break
		}
		require.True(t, time.Now().Before(deadline), "idle heap still %d MB of %d MB (released %d MB more) 20 s after the burst", h.idle()>>20, before.idle()>>20, (int64(h.released)-int64(before.released))>>20)
		time.Sleep(100 * time.Millisecond)
	}
	require.GreaterOrEqual(t, readHeap().live, uint64(64<<20), "the live heap is kept")
	runtime.KeepAlive(live)
}

// TestMemLoop_LeavesABusyHeapAlone: while the process allocates more than
// memQuiet per memCheck, nothing is returned (the next burst would fault it
// back in).
func TestMemLoop_LeavesABusyHeapAlone(t *testing.T) {
	live := fill(64)
	burst := fill(48)
	runtime.KeepAlive(burst)
	burst = nil
	runtime.GC()
	require.GreaterOrEqual(t, readHeap().idle(), uint64(32<<20), "the burst's memory is held idle after the collection")

	ctx, cancel := context.WithCancel(context.Background())
	d := &Daemon{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	done := make(chan error, 1)
	go func() { done <- d.memLoop(ctx) }()
	busy := time.Now().Add(3 * memCheck)
	for time.Now().Before(busy) {
		runtime.KeepAlive(fill(1)) // about 50 MB/s, far above memQuiet per memCheck even when descheduled for a while
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	require.NoError(t, <-done)
	// memLoop's own releases, not the runtime's released bytes: Go's
	// background scavenger returns some memory by itself, busy or not.
	require.Positive(t, d.memChecks.Load(), "memLoop checked while busy")
	require.Zero(t, d.memReleases.Load(), "memory returned while busy")
	runtime.KeepAlive(live)
}

// TestMemLoop_OnceForFragmentedHeap: span space a collection cannot free
// (one live object in each span) stays idle after a release; it is not
// returned again and again at rest, only once.
func TestMemLoop_OnceForFragmentedHeap(t *testing.T) {
	// 96 MiB of 1 KiB objects (8 to a span), one in 8 kept: every span
	// stays, about 84 MiB of it unused after the collection.
	all := make([][]byte, 96<<10)
	for i := range all {
		all[i] = make([]byte, 1<<10)
		all[i][0] = 1
	}
	var live [][]byte
	for i := 0; i < len(all); i += 8 {
		live = append(live, all[i])
	}
	all = nil
	runtime.GC()
	require.GreaterOrEqual(t, readHeap().idle(), uint64(32<<20), "the heap is fragmented")

	ctx, cancel := context.WithCancel(context.Background())
	d := &Daemon{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	done := make(chan error, 1)
	go func() { done <- d.memLoop(ctx) }()
	deadline := time.Now().Add(10 * memCheck)
	for d.memChecks.Load() < 5 {
		require.True(t, time.Now().Before(deadline), "memLoop looked %d times", d.memChecks.Load())
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	require.NoError(t, <-done)
	require.LessOrEqual(t, d.memReleases.Load(), int64(1), "releases of the same idle span space")
	runtime.KeepAlive(live)
}

// fill allocates mb MiB in 1 MiB pieces, written so that they are backed.
func fill(mb int) [][]byte {
	out := make([][]byte, mb)
	for i := range out {
		out[i] = make([]byte, 1<<20)
		for j := 0; j < len(out[i]); j += 4096 {
			out[i][j] = 1
		}
	}
	return out
}

// TestParse_ReleaseMemory: on by default; --release-memory=false and
// "release_memory": false turn it off.
func TestParse_ReleaseMemory(t *testing.T) {
	c, err := Parse(nil, io.Discard)
	require.NoError(t, err)
	require.True(t, c.releaseMemory())
	c, err = Parse([]string{"--release-memory=false"}, io.Discard)
	require.NoError(t, err)
	require.False(t, c.releaseMemory())
	c, err = decode("fp.json", []byte(`{"release_memory": false}`))
	require.NoError(t, err)
	require.False(t, c.WithDefaults().releaseMemory())
}
