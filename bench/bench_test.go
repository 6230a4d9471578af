package bench_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/fencepost/fencepost/bench"
)

// TestSteadyTiny runs a steady run of about two seconds per side against an
// embedded server: nothing lost, no stale commit, both sides delivered, and
// the JSON names machines rely on.
func TestSteadyTiny(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var progress int
	rep, err := bench.Run(ctx, bench.Config{
		Scenario: bench.ScenarioSteady, Size: bench.SizeSmoke,
		IDs: 4, Producers: 1, Duration: 2 * time.Second, Rounds: 2, Window: 32, MaxBacklog: 500, Settle: 10 * time.Second,
		Progress: func(bench.Progress) { progress++ },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", rep)
	if rep.Lost != 0 || rep.RawLost != 0 || rep.StaleCommits != 0 || !rep.OK() {
		t.Errorf("lost %d, raw lost %d, stale %d", rep.Lost, rep.RawLost, rep.StaleCommits)
	}
	if rep.StaleChecked != rep.Delivered {
		t.Errorf("%d of %d deliveries checked for a stale epoch", rep.StaleChecked, rep.Delivered)
	}
	if rep.Sent == 0 || rep.Delivered < rep.Sent || rep.RawDelivered < rep.RawSent {
		t.Errorf("sent %d delivered %d, raw sent %d delivered %d", rep.Sent, rep.Delivered, rep.RawSent, rep.RawDelivered)
	}
	if rep.Ratio <= 0 || rep.Throughput <= 0 || rep.RawThroughput <= 0 {
		t.Errorf("ratio %v throughput %v raw %v", rep.Ratio, rep.Throughput, rep.RawThroughput)
	}
	if rep.LatencyP50 <= 0 || rep.LatencyP99 < rep.LatencyP50 || rep.LatencyP999 < rep.LatencyP99 {
		t.Errorf("latency p50 %v p99 %v p999 %v", rep.LatencyP50, rep.LatencyP99, rep.LatencyP999)
	}
	if progress == 0 {
		t.Error("no progress reported")
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"scenario", "throughput", "raw_throughput", "ratio", "latency_p50_ms", "latency_p99_ms", "latency_p999_ms", "takeover_gap_p99_ms", "duplicates_pct", "lost", "stale_commits"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON has no %q: %s", k, b)
		}
	}
	if m["scenario"] != "steady" || m["takeover_gap_p99_ms"] != 0.0 {
		t.Errorf("scenario %v, takeover_gap_p99_ms %v", m["scenario"], m["takeover_gap_p99_ms"])
	}
}
