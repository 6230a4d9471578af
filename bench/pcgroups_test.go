package bench_test

import (
	"testing"
	"time"

	"github.com/fencepost/fencepost/bench"
)

// checkPeer checks what the pcgroups side must give: it ran beside the
// others, delivered everything it was sent, lost nothing, kept per-id
// order (every delivered message checked), and the ratios are printed.
func checkPeer(t *testing.T, rep bench.Report) *bench.PeerReport {
	t.Helper()
	p := rep.Pcgroups
	if p == nil {
		t.Fatal("no pcgroups side in the report")
	}
	t.Logf("pcgroups: %.0f msgs/s (%.2fx raw; ours/pcgroups %.2fx), p50 %.1f p99 %.1f ms, lost %d, order %d of %d, dup %.3f%%, final drained %d, takeovers %d gaps %+v",
		p.Throughput, p.Ratio, rep.RatioPcgroups, p.LatencyP50, p.LatencyP99, p.Lost, p.OrderViolations, p.OrderChecked, p.DuplicatesPct, p.FinalDrained, p.Takeovers, p.TakeoverGaps)
	if p.Lost != 0 || p.OrderViolations != 0 || !p.OK() {
		t.Errorf("pcgroups: lost %d %v, out of order %d %v", p.Lost, p.LostExamples, p.OrderViolations, p.OrderExamples)
	}
	if p.Sent == 0 || p.Delivered < p.Sent || p.OrderChecked != p.Sent {
		t.Errorf("pcgroups: sent %d, delivered %d, order checked %d", p.Sent, p.Delivered, p.OrderChecked)
	}
	if p.Throughput <= 0 || p.Ratio <= 0 || rep.RatioPcgroups <= 0 || p.MaxAckPending != 1 {
		t.Errorf("pcgroups: throughput %v ratio %v, ours/pcgroups %v, max ack pending %d", p.Throughput, p.Ratio, rep.RatioPcgroups, p.MaxAckPending)
	}
	if rep.OrderViolations != 0 || rep.RawOrderViolations != 0 || rep.OrderChecked == 0 {
		t.Errorf("out of order: ours %d of %d %v, raw %d", rep.OrderViolations, rep.OrderChecked, rep.OrderExamples, rep.RawOrderViolations)
	}
	return p
}

// TestPcgroupsFanInTiny: the pcgroups side in fan-in, its members in the
// bench's process.
func TestPcgroupsFanInTiny(t *testing.T) {
	rep := runTiny(t, bench.Config{
		Scenario: bench.ScenarioFanIn, Size: bench.SizeSmoke, Peer: bench.PeerPcgroups,
		IDs: 100, Producers: 1, Rounds: 2, Workers: 2, Settle: 20 * time.Second,
	})
	p := checkPeer(t, rep)
	if p.Sent != 200 || p.Members != 2 || p.Processes != 0 {
		t.Errorf("pcgroups sent %d with %d members in %d processes, want 200, 2 members, in-process", p.Sent, p.Members, p.Processes)
	}
}

// TestPcgroupsTakeoverTiny: the pcgroups side's member processes hit as
// ours' owners are (killed, stopped past the ttl, and "seized": its
// members stepped down): a killed process's members move to an instance
// in another process after the pinned TTL (the run's ttl), nothing is
// lost, per-id order holds, and the gaps are measured.
func TestPcgroupsTakeoverTiny(t *testing.T) {
	rep := runTiny(t, bench.Config{
		Scenario: bench.ScenarioTakeover, Size: bench.SizeSmoke, Peer: bench.PeerPcgroups,
		IDs: 4, Producers: 1, Duration: 6 * time.Second, Rounds: 1, Window: 32, MaxBacklog: 500, Settle: 15 * time.Second,
		Owners: 2, FaultEvery: 2 * time.Second,
	})
	p := checkPeer(t, rep)
	if p.Processes != 2 || p.Members != 2 {
		t.Errorf("pcgroups: %d members in %d processes, want 2 in 2", p.Members, p.Processes)
	}
	// The first fault is a kill; on a loaded machine a later one may find
	// no process that delivered anything yet and be skipped.
	g := p.TakeoverGaps[bench.FaultKill]
	if p.Takeovers < 2 || g.Faults != 1 || g.Samples == 0 || g.Unmeasured == g.Samples || p.TakeoverGapP99 <= 0 {
		t.Errorf("pcgroups: %d takeovers %+v, kill gaps %+v", p.Takeovers, p.Faults, g)
	}
}
