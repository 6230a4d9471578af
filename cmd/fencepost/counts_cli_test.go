package main_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// jsonOut decodes the one JSON object a command printed.
func jsonOut(t *testing.T, r result) map[string]any {
	t.Helper()
	require.Equal(t, 0, r.code, r.err)
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.out), &m), r.out)
	return m
}

// TestCLI_CommittedNotWaiting: committed mail not yet removed is not
// depth in stat, stat --json, ls --with-mail or world info; it is committed_stored. The world purges by fencepostd, which
// does not run here: every commit leaves its messages stored.
func TestCLI_CommittedNotWaiting(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{MinTTL: time.Second, Purge: world.PurgeByServer})
	url, wn := env.URL, w.Name
	for _, body := range []string{"1", "2", "3"} {
		require.Equal(t, 0, cli(t, url, wn, "send", "a", body).code)
	}
	require.Equal(t, 0, cli(t, url, wn, "claim", "a", "--node", "n1").code)
	r := cli(t, url, wn, "drain", "a", "--node", "n1", "--epoch", "1")
	require.Equal(t, 0, r.code, r.err)
	require.Contains(t, r.out, "done count=3")
	require.Equal(t, 0, cli(t, url, wn, "send", "b", "4").code)

	ws := jsonOut(t, cli(t, url, wn, "stat", "--json"))
	require.EqualValues(t, 1, ws["depth"], "committed mail counted as waiting")
	require.EqualValues(t, 1, ws["ids"])
	require.EqualValues(t, 3, ws["committed_stored"])
	require.NotEmpty(t, ws["committed_age"], "how long committed mail has waited for its removal")
	st := jsonOut(t, cli(t, url, wn, "stat", "a", "--json"))
	require.EqualValues(t, 0, st["depth"])
	require.EqualValues(t, 3, st["committed_stored"])
	require.NotEmpty(t, st["committed_age"])
	st = jsonOut(t, cli(t, url, wn, "stat", "b", "--json"))
	require.NotContains(t, st, "committed_age", "b has nothing committed")

	r = cli(t, url, wn, "ls", "--with-mail")
	require.Equal(t, 0, r.code, r.err)
	require.Equal(t, "id id=b state=free epoch=0 depth=1 dead=0\nlisted count=1\n", r.out)
	r = cli(t, url, wn, "ls")
	require.Equal(t, 0, r.code, r.err)
	require.Regexp(t, `(?m)^id id=a state=held .* depth=0 dead=0 committed_stored=3$`, r.out)

	r = cli(t, url, "default", "world", "info", wn)
	require.Equal(t, 0, r.code, r.err)
	for _, want := range []string{" depth=1 ", " mailboxes=1 ", " committed_stored=3 ", " committed_age="} {
		require.Contains(t, r.out, want)
	}
}

// TestCLI_DLQSkipAndUnroutable: dlq skip moves a message to the dead
// letters, and dlq purge --unroutable drops the world's
// unroutable messages.
func TestCLI_DLQSkipAndUnroutable(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{MinTTL: time.Second})
	url, wn := env.URL, w.Name
	require.Equal(t, 0, cli(t, url, wn, "send", "a", "stuck").code)
	require.Equal(t, 0, cli(t, url, wn, "send", "a", "next").code)
	st := jsonOut(t, cli(t, url, wn, "stat", "a", "--json"))
	seq := strconv.Itoa(int(st["next_seq"].(float64)))

	for _, args := range [][]string{
		{"dlq", "skip", "a"},                    // no --seq
		{"dlq", "ls", "a", "--seq", seq},        // --seq with ls
		{"dlq", "skip", "--unroutable"},         // skip has no --unroutable
		{"dlq", "purge", "a", "--unroutable"},   // --unroutable takes no ID
		{"dlq", "repost", "--unroutable"},       // nor repost
		{"dlq", "skip", "a", "b", "--seq", seq}, // one ID
	} {
		r := cli(t, url, wn, args...)
		require.Equal(t, 2, r.code, "%v: %s %s", args, r.out, r.err)
	}
	r := cli(t, url, wn, "dlq", "skip", "b", "--seq", seq)
	require.Equal(t, 1, r.code, r.out)
	require.Contains(t, r.err, "not in the mailbox of")
	r = cli(t, url, wn, "dlq", "skip", "a", "--seq", seq)
	require.Equal(t, 0, r.code, r.err)
	require.Equal(t, "skipped seq="+seq+"\n", r.out)
	r = cli(t, url, wn, "dlq", "ls", "a")
	require.Equal(t, 0, r.code, r.err)
	require.Contains(t, r.out, "body=stuck")
	require.Contains(t, r.out, "skipped by an operator")
	st = jsonOut(t, cli(t, url, wn, "stat", "a", "--json"))
	require.EqualValues(t, 1, st["depth"])
	require.EqualValues(t, 1, st["dead"])

	// Two unroutable messages moved aside (as fencepostd does), purged.
	for _, body := range []string{"u1", "u2"} {
		testutil.Publish(t, testutil.Ctx(t, 10*time.Second), w, wire.UnroutableSubject(wn), body, wire.HeaderDeadSeq, "1")
	}
	r = cli(t, url, wn, "dlq", "purge", "--unroutable")
	require.Equal(t, 0, r.code, r.err)
	require.Equal(t, "purged count=2\n", r.out)
	r = cli(t, url, wn, "dlq", "ls", "--unroutable")
	require.Equal(t, "listed count=0\n", r.out)
}

// TestCLI_WorldAddHeaderLimits: --max-headers above what the broker stores
// is refused, naming the limit; --max-msg-size, the old
// name of --max-body, says so, and the world's max_msg_size (body plus
// headers) is shown under that name (item 9).
func TestCLI_WorldAddHeaderLimits(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	url := env.URL
	r := cli(t, url, "default", "world", "add", "hdrs", "--max-headers", "100000")
	require.Equal(t, 1, r.code, r.out)
	require.Contains(t, r.err, "max_headers 100000 is over 65535 bytes")
	r = cli(t, url, "default", "world", "ls")
	require.NotContains(t, r.out, "name=hdrs ")

	r = cli(t, url, "default", "world", "add", "old", "--max-msg-size", "1000")
	require.Equal(t, 0, r.code, r.err)
	require.Contains(t, r.out, " max_body=1000 max_headers=8192 ")
	require.Contains(t, r.out, " max_msg_size=9192")
	require.Contains(t, r.err, "--max-msg-size 1000 is the old name of --max-body")
	r = cli(t, url, "default", "world", "add", "both", "--max-msg-size", "1000", "--max-body", "2000")
	require.Equal(t, 2, r.code, r.out)
	r = cli(t, url, "default", "world", "add", "--help")
	require.NotContains(t, r.out+r.err, "--max-msg-size", "the old name is not offered")
	require.True(t, strings.Contains(r.out+r.err, "--max-body"))
}
