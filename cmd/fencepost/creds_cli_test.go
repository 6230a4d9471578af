package main_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/daemon"
	"github.com/fencepost/fencepost/testkit/testutil"
)

// TestCLI_GlobalFlags_Creds: `fencepost --world W
// --server URL --creds F COMMAND ...` and the same flags after the command
// both work, against fencepostd --auth with the credentials it wrote (the
// environment points nowhere: the flags are what was used).
func TestCLI_GlobalFlags_Creds(t *testing.T) {
	data := t.TempDir()
	cfg, err := daemon.Parse([]string{"--auth", "--port", "-1", "--http", "off", "--data", data, "--log-level", "error"}, io.Discard)
	require.NoError(t, err)
	d, err := daemon.Start(cfg)
	require.NoError(t, err)
	t.Cleanup(d.Close)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = d.Run(ctx) }()
	g := func(role string) []string {
		return []string{"--world", "default", "--server", d.ClientURL(), "--creds", daemon.CredsFile(data, role)}
	}
	before := func(role string, args ...string) result {
		return cli(t, nowhere, noWorld, append(g(role), args...)...)
	}
	after := func(role string, args ...string) result {
		return cli(t, nowhere, noWorld, append(args, g(role)...)...)
	}
	testutil.WaitFor(t, 20*time.Second, "fencepostd answers the producer", func() bool {
		return before(daemon.RoleProducer, "send", "x", "one").code == 0
	})
	r := after(daemon.RoleProducer, "send", "x", "two")
	require.Equal(t, 0, r.code, "%+v", r)
	require.True(t, strings.HasPrefix(r.out, "posted seq="), r.out)
	r = before(daemon.RoleOperator, "claim", "x", "--node", "n1")
	require.Equal(t, 0, r.code, "%+v", r)
	r = after(daemon.RoleOperator, "owner", "x")
	require.Equal(t, 0, r.code, "%+v", r)
	require.True(t, strings.HasPrefix(r.out, "owned-by node=n1 epoch=1 "), r.out)
	// The producer's creds are what was used, before the command too: it
	// may not claim.
	r = before(daemon.RoleProducer, "claim", "y", "--node", "n1")
	require.Equal(t, 1, r.code, "%+v", r)
	require.Contains(t, r.err, "not permitted")
}
