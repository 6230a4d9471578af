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
}
