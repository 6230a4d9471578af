package main_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// TestCLI_FlagValuesRefused: values that used to mean something else are
// usage errors that say what to give: --ttl 0s (it
// silently meant the world default), --epoch 0 (it said "required"),
// --max 0 and negatives (-1 meant no limit, -5 drained nothing).
func TestCLI_FlagValuesRefused(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{MinTTL: time.Second})
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"claim", "x", "--node", "n", "--ttl", "0s"}, "leave --ttl out"},
		{[]string{"claim", "x", "--node", "n", "--ttl", "-5s"}, "positive duration"},
		{[]string{"guard", "x", "--node", "n", "--epoch", "0"}, "epochs start at 1"},
		{[]string{"drain", "x", "--node", "n", "--epoch", "0"}, "epochs start at 1"},
		{[]string{"drain", "x", "--node", "n", "--epoch", "1", "--max", "-1"}, "1 or more"},
		{[]string{"drain", "x", "--node", "n", "--epoch", "1", "--max", "0"}, "1 or more"},
	} {
		r := cli(t, env.URL, w.Name, c.args...)
		require.Equal(t, 2, r.code, "%v: %+v", c.args, r)
		require.Contains(t, r.err, c.want, "%v", c.args)
	}
	r := cli(t, env.URL, w.Name, "owner", "x")
	require.Equal(t, 11, r.code, "nothing was claimed: %+v", r)
	r = cli(t, env.URL, w.Name, "claim", "x", "--node", "n", "--ttl", "2s")
	require.Equal(t, 0, r.code, r.err)
}
