package main_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/testkit/testutil"
)

func TestCLI_World(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	url := env.URL
	steps := []struct {
		args   []string
		code   int
		prefix string
		has    []string
	}{
		{[]string{"world", "ls"}, 0, "", nil},
		{[]string{"world", "info", "orders"}, 1, "", []string{"fencepost world add orders"}},
		{[]string{"claim", "x", "--node", "n", "--world", "orders"}, 1, "", []string{"unknown world", "fencepost world add orders"}},
		{[]string{"world", "add", "orders", "--replicas", "2"}, 1, "", []string{"replicas: 2 is not 1, 3 or 5"}},
		{[]string{"world", "add", "orders", "--min-ttl", "5s", "--default-ttl", "1s"}, 1, "", []string{"default_ttl"}},
		{[]string{"world", "add", "orders", "--storage", "tape"}, 1, "", []string{"storage", `"tape"`}},
		{[]string{"world", "add", "bad.name"}, 1, "", []string{"invalid world name"}},
		{[]string{"world", "add", "orders", "--max-deliveries", "3", "--default-ttl", "30s", "--max-msgs", "100"}, 0,
			"created world=orders ", []string{"default_ttl=30s", "max_deliveries=3", "max_msgs=100", "replicas=1", "storage=file"}},
		{[]string{"world", "add", "orders", "--max-deliveries", "3", "--default-ttl", "30s", "--max-msgs", "100"}, 0, "exists world=orders ", nil},
		{[]string{"world", "add", "orders"}, 0, "exists world=orders ", []string{"max_deliveries=3"}},
		{[]string{"world", "add", "orders", "--max-deliveries", "4"}, 1, "", []string{"exists with other settings", "max_deliveries 3 (asked 4)"}},
		{[]string{"world", "add", "cache", "--storage", "memory"}, 0, "created world=cache ", []string{"storage=memory"}},
		{[]string{"world", "add", "parts", "--partitions", "5000"}, 1, "", []string{"partitions: 5000 is outside 0 (none)..1024"}},
		{[]string{"world", "add", "parts", "--partitions", "16"}, 0, "created world=parts ", []string{"partitions=16"}},
		{[]string{"world", "add", "parts", "--partitions", "8"}, 1, "", []string{"exists with other settings", "partitions 16 (asked 8)"}},
		{[]string{"world", "rm", "parts", "--yes"}, 0, "removed world=parts", nil},
		{[]string{"world", "ls"}, 0, "world name=cache replicas=1 storage=memory\nworld name=orders replicas=1 storage=file\n", nil},
		{[]string{"claim", "x", "--node", "n", "--world", "orders"}, 0, "claimed epoch=1 ", nil},
		{[]string{"send", "x", "--world", "orders", "hello"}, 0, "posted ", nil},
		{[]string{"send", "y", "--world", "orders", "hello"}, 0, "posted ", nil},
		{[]string{"world", "info", "orders"}, 0, "world name=orders ", []string{" depth=2 ", " mailboxes=2 ", " records=1 ", " owned=1 ", " acquisitions=1 ", " dead_letters=0 ", "default_ttl=30s"}},
		{[]string{"world", "info", "orders", "--replicas", "3"}, 2, "", []string{"settings flags go with add only"}},
		{[]string{"world", "rm", "orders"}, 2, "", []string{"add --yes"}},
		{[]string{"world", "rm"}, 2, "", []string{"wants the world's NAME"}},
		{[]string{"world", "frob", "x"}, 2, "", []string{"unknown subcommand"}},
		{[]string{"world"}, 2, "", []string{"want a subcommand"}},
		{[]string{"world", "rm", "orders", "--yes"}, 0, "removed world=orders", nil},
		{[]string{"world", "rm", "orders", "--yes"}, 1, "", []string{"unknown world", "fencepost world add orders"}},
		{[]string{"world", "ls"}, 0, "world name=cache ", nil},
	}
	for _, s := range steps {
		r := cli(t, url, "default", s.args...)
		require.Equal(t, s.code, r.code, "%v: stdout %q stderr %q", s.args, r.out, r.err)
		require.True(t, strings.HasPrefix(r.out, s.prefix), "%v: got %q, want prefix %q", s.args, r.out, s.prefix)
		for _, h := range s.has {
			require.Contains(t, r.out+r.err, h, "%v", s.args)
		}
	}

	r := cli(t, url, "cache", "world", "info", "--json")
	require.Equal(t, 0, r.code, r.err)
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.out), &m))
	require.Equal(t, "world", m["outcome"])
	require.Equal(t, "cache", m["name"])
	require.Equal(t, "memory", m["storage"])
	require.EqualValues(t, 0, m["depth"])
	require.Equal(t, "10s", m["default_ttl"])
}
