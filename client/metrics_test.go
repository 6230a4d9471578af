package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/metrics"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// metricValue sums the samples of a metric family (counter, or histogram
// sample count) whose labels include want.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for k, v := range want {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == k && lp.GetValue() == v {
						found = true
					}
				}
				if !found {
					continue next
				}
			}
			switch {
			case m.GetCounter() != nil:
				sum += m.GetCounter().GetValue()
			case m.GetHistogram() != nil:
				sum += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return sum
}

// TestMetrics_CountOperations: the in-process counters move with the
// operations this client performs.
func TestMetrics_CountOperations(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	reg := prometheus.NewRegistry()
	set := metrics.New(reg)
	c, err := client.Connect(env.URL, client.WithMetrics(set))
	require.NoError(t, err)
	defer c.Close()
	ctx := testutil.Ctx(t, time.Minute)
	w, err := c.CreateWorld(ctx, "m", world.Config{MinTTL: 10 * time.Millisecond, MaxDeliveries: 1})
	require.NoError(t, err)
	lbl := map[string]string{"world": "m"}

	l, err := w.Ownership.Claim(ctx, "a", "n1", time.Minute)
	require.NoError(t, err)
	_, err = w.Ownership.Renew(ctx, "a", "n1", time.Minute)
	require.NoError(t, err)
	_, err = w.Ownership.Claim(ctx, "a", "n2", time.Minute) // held-by: not counted
	require.Error(t, err)
	require.Equal(t, 1.0, metricValue(t, reg, "fencepost_claims_total", lbl))
	require.Equal(t, 1.0, metricValue(t, reg, "fencepost_renewals_total", lbl))

	_, err = w.Queue.Send(ctx, "a", []byte("x"))
	require.NoError(t, err)
	res, err := w.Drainer.DrainLease(ctx, l, func(context.Context, drain.Message) error { return errors.New("no") })
	require.NoError(t, err)
	require.Equal(t, 1, res.DeadLettered)
	require.Equal(t, 1.0, metricValue(t, reg, "fencepost_dead_letters_moved_total", lbl))
	require.Equal(t, 1.0, metricValue(t, reg, "fencepost_drain_duration_seconds", lbl))

	// A seize between the handler and the commit: the commit is fenced.
	_, err = w.Queue.Send(ctx, "a", []byte("y"))
	require.NoError(t, err)
	_, err = w.Drainer.DrainLease(ctx, l, func(context.Context, drain.Message) error {
		_, serr := w.Ownership.Seize(context.Background(), "a", "n2", time.Minute, true)
		return serr
	})
	require.Error(t, err)
	require.Equal(t, 1.0, metricValue(t, reg, "fencepost_seizes_total", lbl))
	require.Equal(t, 1.0, metricValue(t, reg, "fencepost_fenced_commits_total", lbl))

	require.NoError(t, w.Ownership.Release(ctx, "a", "n2"))
	require.Equal(t, 1.0, metricValue(t, reg, "fencepost_releases_total", lbl))

	// A self-fence: the keeper's record is deleted under it.
	l2, err := w.Ownership.Claim(ctx, "b", "n1", 300*time.Millisecond)
	require.NoError(t, err)
	k, err := w.Ownership.Keep(l2)
	require.NoError(t, err)
	defer k.Close()
	require.NoError(t, handles.Of(w).KV.Delete(ctx, wire.RecordKey("b")))
	select {
	case <-k.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("keeper did not self-fence")
	}
	require.Equal(t, 1.0, metricValue(t, reg, "fencepost_self_fences_total", map[string]string{"world": "m", "cause": string(k.Cause())}))
}
