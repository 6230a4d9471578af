package bench_test

import (
	"testing"
	"time"

	"github.com/fencepost/fencepost/bench"
)

// TestCounterTiny: the counter scenario at a tiny size: owner processes
// running a state handler are killed, stopped past their ttl and
// force-seized while posts go on; at the end every id's counter (in
// per-id state) equals the messages posted to it.
func TestCounterTiny(t *testing.T) {
	rep := runTiny(t, bench.Config{
		Scenario: bench.ScenarioCounter, Size: bench.SizeSmoke,
		IDs: 4, Producers: 1, Duration: 6 * time.Second, Rounds: 1, Window: 32, MaxBacklog: 500, Settle: 15 * time.Second,
		Owners: 2, FaultEvery: 2 * time.Second,
	})
	t.Logf("counters off %d of %d (%d counted, %d sent) %v; takeovers %d", rep.CountersOff, rep.CountersChecked, rep.CounterMessages, rep.Sent, rep.CounterExamples, rep.Takeovers)
	if rep.CountersChecked != 4 || rep.CountersOff != 0 {
		t.Errorf("counters off %d of %d: %v", rep.CountersOff, rep.CountersChecked, rep.CounterExamples)
	}
	if rep.CounterMessages != rep.Sent {
		t.Errorf("the counters sum to %d, %d were sent", rep.CounterMessages, rep.Sent)
	}
	if rep.Takeovers < 2 {
		t.Errorf("%d takeovers: %+v", rep.Takeovers, rep.Faults)
	}
}
