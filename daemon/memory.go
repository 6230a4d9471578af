package daemon

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// Returning idle heap memory (docs/design.md 3.11).
//
// fencepostd's embedded server and its own work allocate per message: the
// follower of unroutable messages reads the headers of every message
// posted, and of every message stored at each start (about 1.1 KB of
// garbage per message, 220 MB at each start with 200,000 ids with mail).
// Go's runtime keeps the heap it grew for such a burst, up to about
// twice the live heap (GOGC=100), and returns it to the system only above
// that: a live heap at raw JetStream's (36 vs 42 MB at 200,000 ids) was
// held as 1.45x raw's RSS after a restart, for good. So, once fencepostd
// is quiet again after a burst, memLoop returns what the heap holds
// beyond its live objects (runtime/debug.FreeOSMemory: one collection and
// a release of the free pages). It costs one GC cycle after each burst and
// the page faults of the next burst; nothing it does touches a world.

const (
	memCheck = 2 * time.Second // how often the heap is looked at
	memQuiet = 4 << 20         // bytes allocated within memCheck below which fencepostd is quiet
	memSlack = 16 << 20        // the least idle heap worth a collection to return
)

// memLoop returns the heap's idle memory to the system once fencepostd is
// quiet after a burst: allocated less than memQuiet over the last
// memCheck, and holding beyond its live heap at least memSlack, and a
// quarter of the live heap, more than it held right after the last
// release (span space a collection cannot free, between live objects, is
// not returned, so it does not count twice).
func (d *Daemon) memLoop(ctx context.Context) error {
	t := time.NewTicker(memCheck)
	defer t.Stop()
	var last, kept uint64 // allocs at the last check; idle left by the last release
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		d.memChecks.Add(1)
		h := readHeap()
		quiet := last != 0 && h.allocs-last < memQuiet
		last = h.allocs
		if idle := h.idle(); !quiet || idle < kept+memSlack || idle < kept+h.live/4 {
			continue
		}
		start := time.Now()
		debug.FreeOSMemory()
		after := readHeap()
		last, kept = after.allocs, after.idle()
		d.memReleases.Add(1)
		d.log.Debug("returned idle heap memory to the system", "idle_before_mb", h.idle()>>20, "idle_after_mb", kept>>20,
			"live_mb", after.live>>20, "released_mb", (after.released-h.released)>>20, "took", time.Since(start))
	}
}

// heapFigures are the Go runtime's heap figures memLoop reads.
type heapFigures struct {
	allocs   uint64 // bytes allocated since the start
	live     uint64 // live heap as of the last collection
	held     uint64 // heap memory backed by physical memory: objects, unused span space and free pages not released
	released uint64 // heap memory returned to the system
}

// idle is what the heap holds beyond its live objects.
func (h heapFigures) idle() uint64 {
	if h.held < h.live {
		return 0
	}
	return h.held - h.live
}

func readHeap() heapFigures {
	s := []metrics.Sample{
		{Name: "/gc/heap/allocs:bytes"},
		{Name: "/gc/heap/live:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/unused:bytes"},
		{Name: "/memory/classes/heap/free:bytes"},
		{Name: "/memory/classes/heap/released:bytes"},
	}
	metrics.Read(s)
	v := func(i int) uint64 {
		if s[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return s[i].Value.Uint64()
	}
	return heapFigures{allocs: v(0), live: v(1), held: v(2) + v(3) + v(4), released: v(5)}
}
