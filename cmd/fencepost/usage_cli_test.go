package main_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// TestCLI_UsageErrorsSayWhat: a flag without its value
// says that it needs one (not `expected string value but got "--"`, a
// "--" nobody typed); no command, or a global flag alone, is a short
// error, not the whole usage; an unknown command gets a "did you mean".
func TestCLI_UsageErrorsSayWhat(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"claim", "x", "--node"}, "fencepost claim: flag --node needs a value: --node N\n"},
		{[]string{"claim", "x", "--ttl"}, "fencepost claim: flag --ttl needs a value: --ttl D\n"},
		{[]string{"guard", "x", "--node", "n", "--epoch"}, "fencepost guard: flag --epoch needs a value: --epoch E\n"},
		{[]string{"send", "x", "--json", "--msg-id"}, "fencepost send: flag --msg-id needs a value: --msg-id K\n"},
		{[]string{"--server"}, "fencepost: flag --server needs a value: --server URL\n"},
		{[]string{"owner", "x", "--world"}, "fencepost owner: flag --world needs a value: --world W\n"},
		{[]string{"--server", "nats://x:4222"}, "fencepost: want a command\n"},
		{[]string{"clam", "x", "--node", "n"}, "fencepost: unknown command \"clam\"; did you mean claim?\n"},
		{[]string{"sned", "x", "y"}, "fencepost: unknown command \"sned\"; did you mean send?\n"},
		{[]string{"st"}, "fencepost: unknown command \"st\"; did you mean stat or state?\n"},
		{[]string{"wrok"}, "fencepost: unknown command \"wrok\"; did you mean work?\n"},
		{[]string{"help", "dlg"}, "fencepost: unknown command \"dlg\"; did you mean dlq?\n"},
		{[]string{"xyzzy"}, "fencepost: unknown command \"xyzzy\"\n"},
	} {
		r := cli(t, nowhere, noWorld, c.args...)
		require.Equal(t, 2, r.code, "%v: %+v", c.args, r)
		require.Empty(t, r.out, "%v", c.args)
		require.True(t, strings.HasPrefix(r.err, c.want), "%v: %q", c.args, r.err)
		require.NotContains(t, r.err, `"--"`, "%v", c.args)
		require.NotContains(t, r.err, "commands:", "%v: not the whole usage", c.args)
		require.Equal(t, 2, strings.Count(r.err, "\n"), "%v: the error and a usage line: %q", c.args, r.err)
	}
}

// TestCLI_NeverIssuedEpoch: guard and drain with an
// epoch above the current one, which was never issued, answer fenced
// (exit 13) with never_issued beside current, and say on stderr what the
// current epoch is; an epoch that was taken over is the plain fenced.
func TestCLI_NeverIssuedEpoch(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{MinTTL: time.Second})
	r := cli(t, env.URL, w.Name, "claim", "x", "--node", "n1", "--ttl", "1m")
	require.Equal(t, 0, r.code, "%+v", r)

	r = cli(t, env.URL, w.Name, "guard", "x", "--node", "n1", "--epoch", "9")
	require.Equal(t, 13, r.code, "%+v", r)
	require.Equal(t, "fenced current=1 never_issued\n", r.out)
	require.Contains(t, r.err, `epoch 9 of "x" was never issued: its current epoch is 1 (held by node n1)`)
	r = cli(t, env.URL, w.Name, "guard", "x", "--node", "n1", "--epoch", "9", "--json")
	require.Equal(t, 13, r.code, "%+v", r)
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.out), &m), r.out)
	require.Equal(t, map[string]any{"outcome": "fenced", "current": 1.0, "never_issued": true}, m)
	require.Empty(t, r.err)

	r = cli(t, env.URL, w.Name, "drain", "x", "--node", "n1", "--epoch", "5")
	require.Equal(t, 13, r.code, "%+v", r)
	require.Equal(t, "fenced current=1 never_issued\n", r.out)
	require.Contains(t, r.err, "epoch 5 of \"x\" was never issued: its current epoch is 1")

	r = cli(t, env.URL, w.Name, "seize", "x", "--node", "n2", "--force")
	require.Equal(t, 0, r.code, "%+v", r)
	r = cli(t, env.URL, w.Name, "guard", "x", "--node", "n1", "--epoch", "1")
	require.Equal(t, 13, r.code, "%+v", r)
	require.Equal(t, "fenced current=2\n", r.out, "an epoch that was issued, then taken over")
	require.NotContains(t, r.err, "never issued")
}
