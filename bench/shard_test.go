package bench_test

import (
	"testing"
	"time"

	"github.com/fencepost/fencepost/bench"
)

// TestTakeoverTinySharded: the takeover scenario on a sharded world. The
// warm-up waits until every id's shard is held (an owner holds shards, not
// ids); the ledger checks every shard cursor against the deliveries of the
// messages it newly covers, and nothing is lost or committed stale
// (runTiny); each fault's shards are taken over and their gaps measured
// from the deliveries of any id of the shard.
func TestTakeoverTinySharded(t *testing.T) {
	rep := runTiny(t, bench.Config{
		Scenario: bench.ScenarioTakeover, Size: bench.SizeSmoke, Shards: 4, Peer: bench.PeerNone,
		IDs: 8, Producers: 1, Duration: 6 * time.Second, Rounds: 1, Window: 32, MaxBacklog: 500, Settle: 15 * time.Second,
		Owners: 2, FaultEvery: 2 * time.Second,
	})
	if rep.Takeovers < 2 {
		t.Errorf("%d takeovers, want kill, stop and seize: %+v", rep.Takeovers, rep.Faults)
	}
	for k, g := range rep.TakeoverGaps {
		if g.Samples == 0 || g.Unmeasured == g.Samples || g.Max <= 0 {
			t.Errorf("%s: no shard's takeover measured: %+v", k, g)
		}
	}
}

// TestFanInTinySharded: fan-in on a sharded world, its pool's workers
// claiming shards as mail arrives.
func TestFanInTinySharded(t *testing.T) {
	rep := runTiny(t, bench.Config{
		Scenario: bench.ScenarioFanIn, Size: bench.SizeSmoke, Shards: 4, Peer: bench.PeerNone,
		IDs: 100, Producers: 1, Rounds: 2, Workers: 2, Settle: 20 * time.Second,
	})
	if rep.Sent != 200 {
		t.Errorf("sent %d, want 2 per id", rep.Sent)
	}
	t.Logf("committed and stored after the last round: %d, %.1f ms old, %.1f ms of posts", rep.CommittedStored, rep.CommittedStoredAgeMs, rep.CommittedStoredPostMs)
	// What was still stored after the last round is delivered mail of
	// this world only, and its age is known (every post was delivered).
	if rep.CommittedStored > uint64(rep.Sent) {
		t.Errorf("committed and stored %d, more than the %d sent", rep.CommittedStored, rep.Sent)
	}
	if rep.CommittedStored > 0 && (rep.CommittedStoredAgeMs <= 0 || rep.CommittedStoredPostMs <= 0) {
		t.Errorf("committed and stored %d, age %.1f ms, %.1f ms of posts: want both", rep.CommittedStored, rep.CommittedStoredAgeMs, rep.CommittedStoredPostMs)
	}
}
