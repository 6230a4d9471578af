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
		if h.idle() < memSlack && h.released >= before.released+32<<20 {
			break
		}
		require.True(t, time.Now().Before(deadline), "idle heap still %d MB (released %d MB more) 20 s after the burst", h.idle()>>20, (h.released-before.released)>>20)
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
	before := readHeap()

	ctx, cancel := context.WithCancel(context.Background())
	d := &Daemon{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	done := make(chan error, 1)
	go func() { done <- d.memLoop(ctx) }()
	busy := time.Now().Add(3 * memCheck)
	for time.Now().Before(busy) {
		runtime.KeepAlive(fill(1)) // about 10 MB/s, above memQuiet per memCheck
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	require.NoError(t, <-done)
	require.Less(t, readHeap().released, before.released+32<<20, "memory returned while busy")
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
