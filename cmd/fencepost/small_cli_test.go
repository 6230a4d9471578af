package main_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// TestCLI_Send_DashBody: a body that starts with '-' reads as a flag; the
// usage error says to put -- before it, and with -- it is posted as is.
func TestCLI_Send_DashBody(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{MinTTL: time.Second})
	r := cli(t, env.URL, w.Name, "send", "x", "-hello")
	require.Equal(t, 2, r.code, "%q %q", r.out, r.err)
	require.Contains(t, r.err, "put -- before it: fencepost send ID -- -hello")

	r = cli(t, env.URL, w.Name, "send", "x", "--", "-hello")
	require.Equal(t, 0, r.code, r.err)
	require.Contains(t, r.out, "posted seq=1")
	require.Equal(t, 0, cli(t, env.URL, w.Name, "claim", "x", "--node", "n1").code)
	r = cli(t, env.URL, w.Name, "drain", "x", "--node", "n1", "--epoch", "1")
	require.Equal(t, 0, r.code, r.err)
	require.Contains(t, r.out, "body=-hello\n")

	r = cli(t, env.URL, w.Name, "owner", "--nope", "x")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.err, "if -nope is an argument, not a flag, put -- before it")
}
