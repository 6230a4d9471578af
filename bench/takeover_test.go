package bench_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/fencepost/fencepost/bench"
)

// runTiny runs a tiny run of a scenario and checks what every scenario
// must give: nothing lost, no stale commit, every commit checked, both
// sides delivered. Without a Peer it runs none: these runs check
// fencepost's side, and the pcgroups side has runs of its own
// (pcgroups_test.go), so that CI stays short.
func runTiny(t *testing.T, cfg bench.Config) bench.Report {
	t.Helper()
	if cfg.Peer == "" {
		cfg.Peer = bench.PeerNone
	}
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
	rawLost := rep.RawLost
	if cfg.KillLeaders {
		rawLost = 0 // raw's AckAll baseline may lose a batch to a killed leader: TestClusterTiny
	}
	if rep.Lost != 0 || rawLost != 0 || rep.StaleCommits != 0 || !rep.OK() {
		t.Errorf("lost %d, raw lost %d, stale commits %d %v", rep.Lost, rep.RawLost, rep.StaleCommits, rep.StaleExamples)
	}
	if rep.CommitsChecked == 0 || rep.LedgerMissed != 0 {
		t.Errorf("%d commits checked, %d bucket writes missed by the checker", rep.CommitsChecked, rep.LedgerMissed)
	}
	if rep.Sent == 0 || rep.Delivered < rep.Sent || rep.RawDelivered < rep.RawSent-rep.RawLost {
		t.Errorf("sent %d delivered %d, raw sent %d delivered %d", rep.Sent, rep.Delivered, rep.RawSent, rep.RawDelivered)
	}
	if rep.Ratio <= 0 || rep.Throughput <= 0 || rep.RawThroughput <= 0 {
		t.Errorf("ratio %v throughput %v raw %v", rep.Ratio, rep.Throughput, rep.RawThroughput)
	}
	if progress == 0 {
		t.Error("no progress reported")
	}
	// Every delivery was posted: at least one request to the server each.
	if rep.RequestsPerMsg < 1 || rep.RawRequestsPerMsg < 1 {
		t.Errorf("requests per delivery %v, raw %v: want at least the post", rep.RequestsPerMsg, rep.RawRequestsPerMsg)
	}
	// /proc/stat counts CPU in ticks of 10 ms: a tiny side's rounds (raw's
	// 200 fan-in messages take about 13 ms) can fall under one tick and
	// read 0 (unknown). A CPU measure that works reads the slower side.
	if runtime.GOOS == "linux" && rep.CPUPerMsgUs <= 0 && rep.RawCPUPerMsgUs <= 0 {
		t.Errorf("CPU per delivery %v us, raw %v us: neither side measured", rep.CPUPerMsgUs, rep.RawCPUPerMsgUs)
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
	// Three faults are scheduled (kill, stop, seize in turn); on a loaded
	// machine one may find no owner holding an id yet and be skipped.
	if rep.Takeovers < 2 || rep.TakeoverGaps[bench.FaultKill].Faults != 1 {
		t.Errorf("%d takeovers, want kill, stop and seize: %+v", rep.Takeovers, rep.Faults)
	}
	for k, g := range rep.TakeoverGaps {
		if g.Faults != 1 || g.Samples == 0 || g.Unmeasured == g.Samples || g.Max <= 0 {
			t.Errorf("%s: %+v", k, g)
		}
	}
	if rep.TakeoverGapP99 <= 0 || rep.TakeoverGapMax < rep.TakeoverGapP99 {
		t.Errorf("gap p99 %v max %v", rep.TakeoverGapP99, rep.TakeoverGapMax)
	}
}

// TestNoFaultsTiny: with Faults none the owner processes run the whole
// round untouched (the cost of the owners alone, docs/design/pipeline.md), and
// owners or faults for a scenario without owner processes are refused.
func TestNoFaultsTiny(t *testing.T) {
	rep := runTiny(t, bench.Config{
		Scenario: bench.ScenarioTakeover, Size: bench.SizeSmoke,
		IDs: 4, Producers: 1, Duration: 3 * time.Second, Rounds: 1, Window: 32, MaxBacklog: 500, Settle: 15 * time.Second,
		Owners: 2, FaultEvery: time.Second, Faults: []string{bench.FaultNone},
	})
	if rep.Takeovers != 0 || len(rep.Faults) != 0 || rep.Owners != 2 {
		t.Errorf("%d takeovers %+v, %d owners; want none and 2", rep.Takeovers, rep.Faults, rep.Owners)
	}
	// The owners' CPU, read from the exited processes, is part of the
	// machine's.
	if rep.OwnersCPUPerMsgUs <= 0 || (rep.CPUPerMsgUs > 0 && rep.OwnersCPUPerMsgUs >= rep.CPUPerMsgUs) {
		t.Errorf("owners' CPU %.1f us per message, the machine's %.1f", rep.OwnersCPUPerMsgUs, rep.CPUPerMsgUs)
	}
	for _, cfg := range []bench.Config{
		{Scenario: bench.ScenarioSteady, Owners: 2},
		{Scenario: bench.ScenarioFanIn, Faults: []string{bench.FaultNone}},
		{Scenario: bench.ScenarioTakeover, Faults: []string{bench.FaultKill, bench.FaultNone}},
	} {
		if _, err := bench.Run(context.Background(), cfg); err == nil {
			t.Errorf("%+v: no error", cfg)
		}
	}
}

// TestHandoffTiny: owners stopped gracefully (SIGTERM) hand their ids to
// a standby at once: no ttl to wait for.
func TestHandoffTiny(t *testing.T) {
	rep := runTiny(t, bench.Config{
		Scenario: bench.ScenarioHandoff, Size: bench.SizeSmoke,
		IDs: 4, Producers: 1, Duration: 3 * time.Second, Rounds: 1, Window: 32, MaxBacklog: 500, Settle: 15 * time.Second,
		Owners: 2, FaultEvery: 1500 * time.Millisecond, TTL: 3 * time.Second,
	})
	t.Logf("faults %+v", rep.Faults)
	g := rep.TakeoverGaps[bench.FaultTerm]
	if rep.Takeovers < 1 || g.Faults != rep.Takeovers || g.Samples == 0 || g.Unmeasured == g.Samples || g.Max <= 0 {
		t.Errorf("%d takeovers, term gaps %+v", rep.Takeovers, g)
	}
	// How fast the claim and the first delivery come is measured, not
	// asserted: on a loaded machine it takes seconds (see the README).
	t.Logf("handoff: claim p50 %.1f p99 %.1f ms, gap p50 %.1f p99 %.1f ms, stale deliveries %d", g.ClaimP50, g.ClaimP99, g.P50, g.P99, rep.StaleDeliveries)
	if g.ClaimP99 <= 0 {
		t.Errorf("no claim measured: %+v", g)
	}
}

// TestFanInTiny: many ids with a few messages each, drained by a pool.
func TestFanInTiny(t *testing.T) {
	rep := runTiny(t, bench.Config{
		Scenario: bench.ScenarioFanIn, Size: bench.SizeSmoke,
		IDs: 100, Producers: 1, Rounds: 2, Workers: 2, Settle: 20 * time.Second,
	})
	if rep.Sent != 200 || rep.RawSent != 200 {
		t.Errorf("sent %d, raw %d, want 2 per id", rep.Sent, rep.RawSent)
	}
	if rep.Takeovers != 0 || rep.TakeoverGapP99 != 0 {
		t.Errorf("takeovers %d gap %v in fan-in", rep.Takeovers, rep.TakeoverGapP99)
	}
}

// TestZipfTiny: posts drawn from a Zipf distribution over many ids, owner
// processes killed (only killed) and replaced: nothing lost, no stale
// commit (runTiny's checks).
func TestZipfTiny(t *testing.T) {
	rep := runTiny(t, bench.Config{
		Scenario: bench.ScenarioZipf, Size: bench.SizeSmoke,
		IDs: 2000, Producers: 1, Duration: 5 * time.Second, Rounds: 1, Window: 32, MaxBacklog: 1000, Settle: 20 * time.Second,
		Owners: 2, FaultEvery: 2 * time.Second,
	})
	if rep.Owners != 2 {
		t.Errorf("owners %d, want 2", rep.Owners)
	}
	for k := range rep.TakeoverGaps {
		if k != bench.FaultKill {
			t.Errorf("fault %q in zipf, want kills only", k)
		}
	}
	if rep.Takeovers < 1 {
		t.Errorf("no kill: %+v", rep.Faults)
	}
}

// TestTakeoverTinyAuth: the takeover scenario on a fencepostd --auth, the
// producers with the producer role's credentials and each owner process
// (replacements included) with credentials of its own, bound to its node:
// a node owner may not retire the lapsed node lease of the owner it takes
// over from (fencepostd does), and still everything is delivered, nothing
// lost, no stale commit (runTiny's checks), and the killed owner's ids are
// taken over.
func TestTakeoverTinyAuth(t *testing.T) {
	rep := runTiny(t, bench.Config{
		Scenario: bench.ScenarioTakeover, Size: bench.SizeSmoke, Auth: true,
		IDs: 4, Producers: 1, Duration: 6 * time.Second, Rounds: 1, Window: 32, MaxBacklog: 500, Settle: 15 * time.Second,
		Owners: 2, FaultEvery: 2 * time.Second,
	})
	if !rep.Auth {
		t.Error("the report does not say auth")
	}
	if rep.Takeovers < 2 || rep.TakeoverGaps[bench.FaultKill].Faults != 1 {
		t.Errorf("%d takeovers, want kill, stop and seize: %+v", rep.Takeovers, rep.Faults)
	}
	if g := rep.TakeoverGaps[bench.FaultKill]; g.Samples == 0 || g.Unmeasured == g.Samples {
		t.Errorf("the killed owner's ids were not taken over: %+v", g)
	}
}

// TestTakeoverTinyPartitioned: the takeover scenario on a partitioned world
// (docs/design/partitions.md) under fencepostd --auth: each owner process, with
// credentials of its own, reads the republished posts of its partitions
// (the owner role's subscribe permission), and takes over the ids of the
// killed, stopped and seized ones; nothing lost, no stale commit (runTiny).
func TestTakeoverTinyPartitioned(t *testing.T) {
	rep := runTiny(t, bench.Config{
		Scenario: bench.ScenarioTakeover, Size: bench.SizeSmoke, Auth: true, Partitions: 8,
		IDs: 4, Producers: 1, Duration: 6 * time.Second, Rounds: 1, Window: 32, MaxBacklog: 500, Settle: 15 * time.Second,
		Owners: 2, FaultEvery: 2 * time.Second,
	})
	if rep.Partitions != 8 {
		t.Errorf("the report says %d partitions", rep.Partitions)
	}
	if g := rep.TakeoverGaps[bench.FaultKill]; rep.Takeovers < 2 || g.Samples == 0 || g.Unmeasured == g.Samples {
		t.Errorf("%d takeovers, kill gaps %+v", rep.Takeovers, g)
	}
}

// TestAuthNeedsOwnerProcesses: Auth is for the scenarios with owner
// processes, on a server of its own.
func TestAuthNeedsOwnerProcesses(t *testing.T) {
	ctx := context.Background()
	if _, err := bench.Run(ctx, bench.Config{Scenario: bench.ScenarioSteady, Auth: true}); err == nil {
		t.Error("steady with auth: no error")
	}
	if _, err := bench.Run(ctx, bench.Config{Scenario: bench.ScenarioTakeover, Auth: true, URL: "nats://127.0.0.1:1"}); err == nil {
		t.Error("auth with a URL: no error")
	}
}

// TestClusterTiny: steady on an embedded 3-member cluster with R3 streams,
// the mailbox stream's and then the bucket stream's leader killed mid-round
// (raw: its stream's leader twice): nothing of ours lost, no stale commit,
// each kill's stall measured. Raw's loss is logged, not failed: its
// baseline acknowledges with AckAll, and a batch lost with a killed member
// is covered by the next batch's acknowledgement (see README, R3 figures).
func TestClusterTiny(t *testing.T) {
	rep := runTiny(t, bench.Config{
		Scenario: bench.ScenarioSteady, Size: bench.SizeSmoke, Cluster: 3, KillLeaders: true,
		IDs: 4, Producers: 1, Duration: 8 * time.Second, Rounds: 1, Window: 32, MaxBacklog: 500, Settle: 15 * time.Second,
	})
	if rep.Cluster != 3 || rep.Replicas != 3 {
		t.Errorf("cluster %d replicas %d, want 3 and 3", rep.Cluster, rep.Replicas)
	}
	want := map[string]int{"fencepost mailbox": 1, "fencepost bucket": 1, "raw raw": 2}
	for _, k := range rep.LeaderKills {
		t.Logf("%s %s leader %s killed at %.1f s: first delivery after %.0f ms, stall %.0f ms", k.Side, k.Stream, k.Node, k.AtS, k.FirstDeliveryMs, k.StallMs)
		want[k.Side+" "+k.Stream]--
		if k.Node == "" || k.AtS <= 0 || k.StallMs <= 0 {
			t.Errorf("kill %+v: want a node, a time and a stall", k)
		}
	}
	for k, n := range want {
		if n != 0 {
			t.Errorf("%s: %d kills missing (%+v)", k, n, rep.LeaderKills)
		}
	}
}
