package bench

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/world"
)

// TestConfig_PartitionsDefault: PartitionsDefault gives ours' world the
// partitions fencepost world add gives a new world of its replicas (64 on
// one, none on more); 0 stays none and a number stays that number.
func TestConfig_PartitionsDefault(t *testing.T) {
	for _, tc := range []struct {
		in   Config
		want int
	}{
		{Config{Partitions: PartitionsDefault}, world.DefaultPartitions},
		{Config{Partitions: PartitionsDefault, Cluster: 3}, 0},
		{Config{Partitions: PartitionsDefault, Cluster: 3, Replicas: 1}, world.DefaultPartitions},
		{Config{}, 0},
		{Config{Partitions: 16, Cluster: 3}, 16},
	} {
		c, err := tc.in.withDefaults()
		require.NoError(t, err)
		require.Equal(t, tc.want, c.Partitions, "%+v", tc.in)
	}
}

// TestConfig_OwnerGOMAXPROCS: the owners' GOMAXPROCS is refused below 0
// and on a scenario without owner processes; ownerEnv puts it last, so
// that it wins over one inherited from the bench's environment, and adds
// none at 0.
func TestConfig_OwnerGOMAXPROCS(t *testing.T) {
	for _, bad := range []Config{
		{Scenario: ScenarioTakeover, Size: SizeSmoke, OwnerGOMAXPROCS: -1},
		{Scenario: ScenarioSteady, Size: SizeSmoke, OwnerGOMAXPROCS: 1},
		{Scenario: ScenarioFanIn, Size: SizeSmoke, OwnerGOMAXPROCS: 2},
	} {
		_, err := bad.withDefaults()
		require.Error(t, err, "%+v", bad)
	}
	c, err := Config{Scenario: ScenarioZipf, Size: SizeSmoke, OwnerGOMAXPROCS: 1}.withDefaults()
	require.NoError(t, err)
	require.Equal(t, 1, c.OwnerGOMAXPROCS)

	base := []string{"HOME=/h", "GOMAXPROCS=8"}
	env := ownerEnv(base, "{}", 1)
	require.Equal(t, []string{"HOME=/h", "GOMAXPROCS=8", OwnerEnv + "={}", "GOMAXPROCS=1"}, env)
	require.Equal(t, []string{"HOME=/h", "GOMAXPROCS=8"}, base, "the bench's own environment is not written to")
	require.Equal(t, []string{"HOME=/h", OwnerEnv + "={}"}, ownerEnv([]string{"HOME=/h"}, "{}", 0))
}
