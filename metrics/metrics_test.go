package metrics_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/metrics"
)

func TestSet_NilIsANoOp(t *testing.T) {
	var s *metrics.Set
	s.Claimed("w")
	s.Seized("w")
	s.Released("w")
	s.Renewed("w")
	s.FencedCommit("w")
	s.DeadLettered("w", 2)
	s.SelfFenced("w", "lease_watchdog_fence")
	s.Drained("w", time.Millisecond)
	s.SetWorlds(nil, 0, 0)
}

func TestSet_CountersAndWorlds(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := metrics.New(reg)
	s.Claimed("w")
	s.Claimed("w")
	s.SelfFenced("w", "lease_record_missing_fence")
	s.Drained("w", 20*time.Millisecond)
	s.SetWorlds(map[string]metrics.WorldStats{"w": {Depth: 7, OldestAge: 1500 * time.Millisecond, Owned: 3, Acquisitions: 9}}, time.Millisecond, 1)

	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP fencepost_claims_total Claims won by this process (outcome claimed).
# TYPE fencepost_claims_total counter
fencepost_claims_total{world="w"} 2
# HELP fencepost_self_fences_total Leases this process gave up because its authority lapsed, by cause.
# TYPE fencepost_self_fences_total counter
fencepost_self_fences_total{cause="lease_record_missing_fence",world="w"} 1
# HELP fencepost_world_mailbox_depth Messages waiting in the world's mailboxes (dead letters excluded).
# TYPE fencepost_world_mailbox_depth gauge
fencepost_world_mailbox_depth{world="w"} 7
# HELP fencepost_world_mailbox_oldest_age_seconds Age of the oldest message in any mailbox of the world; 0 when all are empty.
# TYPE fencepost_world_mailbox_oldest_age_seconds gauge
fencepost_world_mailbox_oldest_age_seconds{world="w"} 1.5
# HELP fencepost_world_ids_owned Ids with a live holder.
# TYPE fencepost_world_ids_owned gauge
fencepost_world_ids_owned{world="w"} 3
# HELP fencepost_world_acquisitions_total Claims and seizes by any process since the world's last reset (the sum of the records' epochs).
# TYPE fencepost_world_acquisitions_total counter
fencepost_world_acquisitions_total{world="w"} 9
# HELP fencepost_scrape_errors_total Reads of a world that failed.
# TYPE fencepost_scrape_errors_total counter
fencepost_scrape_errors_total 1
`), "fencepost_claims_total", "fencepost_self_fences_total", "fencepost_world_mailbox_depth",
		"fencepost_world_mailbox_oldest_age_seconds", "fencepost_world_ids_owned", "fencepost_world_acquisitions_total", "fencepost_scrape_errors_total"))
	require.Equal(t, 1, testutil.CollectAndCount(reg, "fencepost_drain_duration_seconds"))

	s.SetWorlds(map[string]metrics.WorldStats{}, 0, 0)
	require.Equal(t, 0, testutil.CollectAndCount(reg, "fencepost_world_mailbox_depth"), "a removed world is no longer published")
	require.NotNil(t, metrics.Default)
}
