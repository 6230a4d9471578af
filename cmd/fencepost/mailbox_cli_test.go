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

func TestCLI_MailboxWordsAndExitCodes(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{MinTTL: time.Second, MaxMsgSize: 4096, MaxMsgsPerMailbox: 3})
	url, wn := env.URL, w.Name
	steps := []struct {
		args   []string
		code   int
		prefix string
	}{
		{[]string{"send", "a.b c", "--from", "me", "hello world"}, 0, "posted seq=1"},
		{[]string{"send", "a.b c", "--msg-id", "k1", "second"}, 0, "posted seq=2\n"},
		{[]string{"send", "a.b c", "--msg-id", "k1", "second"}, 0, "posted seq=2 duplicate"},
		{[]string{"stat", "a.b c"}, 0, "stat depth=2 oldest="},
		{[]string{"drain", "a.b c", "--node", "n1", "--epoch", "1"}, 11, "free epoch=0"},
		{[]string{"claim", "a.b c", "--node", "n1"}, 0, "claimed epoch=1"},
		{[]string{"drain", "a.b c", "--node", "n2", "--epoch", "1"}, 10, "held-by node=n1 epoch=1"},
		{[]string{"drain", "a.b c", "--node", "n1", "--epoch", "2"}, 13, "fenced current=1"},
		{[]string{"drain", "a.b c", "--node", "n1", "--epoch", "1", "--max", "1"}, 0, "message seq=1 from=me delivery=1 epoch=1 body=\"hello world\"\ndone count=1"},
		{[]string{"drain", "a.b c", "--node", "n1", "--epoch", "1"}, 0, "message seq=2 from=\"\" delivery=1 epoch=1 body=second\ndone count=1"},
		{[]string{"send", "x", "1"}, 0, "posted"},
		{[]string{"send", "x", "2"}, 0, "posted"},
		{[]string{"send", "x", "3"}, 0, "posted"},
		{[]string{"send", "x", "4"}, 16, "full limit=3"},
		{[]string{"stat"}, 0, "stat world=" + wn + " ids=1 depth=3 owned=1 dead=0"},
		{[]string{"dlq", "ls", "x"}, 0, "listed count=0"},
		{[]string{"dlq", "purge", "x"}, 0, "purged count=0"},
		{[]string{"dlq", "repost", "x"}, 0, "reposted count=0"},
		{[]string{"dlq", "nope", "x"}, 2, ""},
		{[]string{"dlq", "ls", "--unroutable"}, 0, "listed count=0"},
		{[]string{"dlq", "ls", "x", "--unroutable"}, 2, ""},
	}
	for _, s := range steps {
		r := cli(t, url, wn, s.args...)
		require.Equal(t, s.code, r.code, "%v: out=%q err=%q", s.args, r.out, r.err)
		require.True(t, strings.HasPrefix(r.out, s.prefix), "%v: got %q, want prefix %q", s.args, r.out, s.prefix)
	}

	// A message id's scope is its mailbox (docs/wire.md "Duplicates").
	for _, id := range []string{"s1", "s2"} {
		r := cli(t, url, wn, "send", id, "--msg-id", "same", "body")
		require.Equal(t, 0, r.code, r.err)
		require.NotContains(t, r.out, "duplicate", id)
	}

	r := cli(t, url, wn, "send", "big", strings.Repeat("x", 5000))
	require.Equal(t, 1, r.code)
	require.Contains(t, r.err, "this world's max_body is")

	r = cli(t, url, wn, "send", "j", "--msg-id", "k", "body", "--json")
	require.Equal(t, 0, r.code, r.err)
	var posted map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.out), &posted))
	require.Equal(t, map[string]any{"outcome": "posted", "seq": float64(posted["seq"].(float64)), "duplicate": false}, posted)
	require.Equal(t, 0, cli(t, url, wn, "claim", "j", "--node", "n1").code)
	r = cli(t, url, wn, "drain", "j", "--node", "n1", "--epoch", "1", "--json")
	require.Equal(t, 0, r.code, r.err)
	lines := strings.Split(strings.TrimSpace(r.out), "\n")
	require.Len(t, lines, 2)
	var msg, done map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &msg))
	require.NoError(t, json.Unmarshal([]byte(lines[1]), &done))
	require.Equal(t, "message", msg["outcome"])
	require.Equal(t, "body", msg["body"])
	require.Equal(t, float64(1), msg["delivery"])
	require.Equal(t, float64(1), msg["epoch"])
	require.Equal(t, "done", done["outcome"])
	require.Equal(t, float64(1), done["count"])
}
