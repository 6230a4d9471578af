package bench_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencepost/fencepost/bench"
)

// runTiny runs a tiny run of a scenario and checks what every scenario
// must give: nothing lost, no stale commit, every commit checked, both
// sides delivered.
func runTiny(t *testing.T, cfg bench.Config) bench.Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var progress int
	cfg.Progress = func(bench.Progress) { progress++ }
	rep, err := bench.Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ratio %.2f (%.0f vs %.0f msgs/s) lost %d stale commits %d of %d, stale deliveries %d, dup %.3f%%, takeovers %d gaps %+v, final drained %d",
		rep.Ratio, rep.Throughput, rep.RawThroughput, rep.Lost, rep.StaleCommits, rep.CommitsChecked, rep.StaleDeliveries, rep.DuplicatesPct, rep.Takeovers, rep.TakeoverGaps, rep.FinalDrained)
	if rep.Lost != 0 || rep.RawLost != 0 || rep.StaleCommits != 0 || !rep.OK() {
		t.Errorf("lost %d, raw lost %d, stale commits %d %v", rep.Lost, rep.RawLost, rep.StaleCommits, rep.StaleExamples)
	}
	if rep.CommitsChecked == 0 {
		t.Error("no commit checked")
	}
	if rep.Sent == 0 || rep.Delivered < rep.Sent || rep.RawDelivered < rep.RawSent {
		t.Errorf("sent %d delivered %d, raw sent %d delivered %d", rep.Sent, rep.Delivered, rep.RawSent, rep.RawDelivered)
	}
	if rep.Ratio <= 0 || rep.Throughput <= 0 || rep.RawThroughput <= 0 {
		t.Errorf("ratio %v throughput %v raw %v", rep.Ratio, rep.Throughput, rep.RawThroughput)
	}
	if progress == 0 {
		t.Error("no progress reported")
	}
	if len(rep.Timeline) == 0 {
		t.Error("no timeline")
	}
	return rep
}

// TestTakeoverTiny: owner processes (this test binary, see TestMain) are
// killed, stopped past their ttl and force-seized; standbys take over;
// nothing is lost, no stale commit is accepted, and the gaps are measured.
func TestTakeoverTiny(t *testing.T) {
	rep := runTiny(t, bench.Config{
		Scenario: bench.ScenarioTakeover, Size: bench.SizeSmoke,
		IDs: 4, Producers: 1, Duration: 6 * time.Second, Rounds: 1, Window: 32, MaxBacklog: 500, Settle: 15 * time.Second,
		Owners: 2, FaultEvery: 2 * time.Second,
	})
	if rep.Takeovers != 3 {
		t.Errorf("%d takeovers, want 3 (kill, stop, seize): %+v", rep.Takeovers, rep.Faults)
	}
	for _, k := range []string{bench.FaultKill, bench.FaultStop, bench.FaultSeize} {
		g := rep.TakeoverGaps[k]
		if g.Faults != 1 || g.Samples == 0 || g.Unmeasured != 0 || g.Max <= 0 {
			t.Errorf("%s: %+v", k, g)
		}
	}
	if rep.TakeoverGapP99 <= 0 || rep.TakeoverGapMax < rep.TakeoverGapP99 {
		t.Errorf("gap p99 %v max %v", rep.TakeoverGapP99, rep.TakeoverGapMax)
	}
}
