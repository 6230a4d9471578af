package bench_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/bench"
)

// TestCallTiny: the call scenario reports fencepost's calls and raw
// request-reply's in one run, both answered, none timed out.
func TestCallTiny(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rep, err := bench.Run(ctx, bench.Config{Scenario: bench.ScenarioCall, Size: bench.SizeSmoke, IDs: 3, Producers: 4, Duration: 2 * time.Second, Rounds: 2})
	require.NoError(t, err)
	t.Logf("%+v", *rep.Calls)
	c := rep.Calls
	require.NotNil(t, c)
	require.Equal(t, 4, c.Callers)
	require.Positive(t, c.Ours.Calls)
	require.Positive(t, c.Raw.Calls)
	require.Positive(t, c.Ours.PerSecond)
	require.Positive(t, c.Raw.PerSecond)
	require.Positive(t, c.Ours.LatencyP50)
	require.GreaterOrEqual(t, c.Ours.LatencyP99, c.Ours.LatencyP50)
	require.Zero(t, c.Ours.Timeouts+c.Ours.Failed+c.Raw.Timeouts+c.Raw.Failed)
	require.Positive(t, c.Ratio)
	require.Contains(t, bench.Scenarios, bench.ScenarioCall)

	// A sharded world answers calls too (its shards' holders).
	rep, err = bench.Run(ctx, bench.Config{Scenario: bench.ScenarioCall, Size: bench.SizeSmoke, IDs: 3, Producers: 4, Duration: 2 * time.Second, Rounds: 2, Shards: 4})
	require.NoError(t, err)
	require.Positive(t, rep.Calls.Ours.Calls)
	require.Zero(t, rep.Calls.Ours.Timeouts+rep.Calls.Ours.Failed)
}
