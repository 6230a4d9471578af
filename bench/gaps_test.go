package bench

import (
	"testing"
	"time"
)

// TestGapStats_PendingAndIdle: a victim's id with mail waiting at the fault
// counts its gap from the fault; an id whose first mail after the fault
// was posted later counts it from that post in IdleP99, while the overall
// gap (fault to first delivery) keeps the wait for the post in it.
func TestGapStats_PendingAndIdle(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ns := func(d time.Duration) int64 { return t0.Add(d).UnixNano() }
	ps := &procSet{led: newLedger("w"), gaps: map[string][]*gapSample{}, faults: []Fault{{Kind: FaultKill}}}
	for _, id := range []string{"busy", "tail", "never"} {
		g := &gapSample{id: id, epoch: 1, at: ns(0), kind: FaultKill}
		ps.gaps[id] = append(ps.gaps[id], g)
		ps.samples = append(ps.samples, g)
	}
	// busy: posted before the fault, delivered under epoch 2 at 1.2 s (and
	// again later: only the first counts). An epoch-1 delivery (the victim
	// before it died) does not count.
	ps.observe("busy", 1, ns(-time.Second), ns(100*time.Millisecond))
	ps.observe("busy", 2, ns(-time.Second), ns(1200*time.Millisecond))
	ps.observe("busy", 2, ns(-time.Second), ns(1500*time.Millisecond))
	// tail: nothing waiting; posted 20 s after the fault, delivered 300 ms
	// after its post.
	ps.observe("tail", 2, ns(20*time.Second), ns(20300*time.Millisecond))

	st := ps.gapStats()[FaultKill]
	if st.Samples != 3 || st.Unmeasured != 1 {
		t.Fatalf("samples %d unmeasured %d, want 3 and 1", st.Samples, st.Unmeasured)
	}
	if st.PendingSamples != 1 || st.PendingP99 != 1200 {
		t.Fatalf("pending %d p99 %v ms, want 1 and 1200", st.PendingSamples, st.PendingP99)
	}
	if st.IdleSamples != 1 || st.IdleP99 != 300 {
		t.Fatalf("idle %d p99 %v ms, want 1 and 300", st.IdleSamples, st.IdleP99)
	}
	if st.P99 != 20300 || st.P50 != 1200 {
		t.Fatalf("gap p50 %v p99 %v ms, want 1200 and 20300", st.P50, st.P99)
	}
	if got := ps.faults[0].GapMs; got != 20300 {
		t.Fatalf("the fault's longest gap %v ms, want 20300", got)
	}
}
