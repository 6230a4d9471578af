package main_test

import (
	"os/exec"
	"regexp"
	"testing"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"
)

// TestDaemon_Version: --version prints the version of
// fencepostd, as fencepost --version does, and of the nats-server it
// embeds, and exits 0 without starting anything, also among other flags;
// --help names it.
func TestDaemon_Version(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"-version"}, {"--port", "1", "--version"}} {
		out, err := exec.Command(bin, args...).Output()
		require.NoError(t, err, "%v", args)
		require.Regexp(t, `^fencepostd (devel|v\S+)( \([0-9a-f]{12}(, modified)?\))? \(nats-server v`+regexp.QuoteMeta(natsserver.VERSION)+`\)\n$`, string(out), "%v", args)
	}
	out, err := exec.Command(bin, "--help").CombinedOutput()
	require.NoError(t, err)
	require.Contains(t, string(out), "--version prints the version")
}
