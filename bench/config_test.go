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
