package main_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// jsonOf is the one JSON object of r's stdout.
func jsonOf(t *testing.T, r result) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.out), &m), "%+v", r)
	return m
}

// jsonLines is every JSON object of r's stdout.
func jsonLines(t *testing.T, r result) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSuffix(r.out, "\n"), "\n") {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &m), l)
		out = append(out, m)
	}
	return out
}

// lastSeqs are the last sequences of a world's bucket and mailbox
// streams: what a command that writes nothing leaves as they were.
func lastSeqs(t *testing.T, env *testutil.Env, name string) [2]uint64 {
	t.Helper()
	ctx := testutil.Ctx(t, 10*time.Second)
	var out [2]uint64
	for i, s := range []string{wire.BucketStream(name), wire.MailboxStream(name)} {
		st, err := env.Client.JetStream().Stream(ctx, s)
		require.NoError(t, err)
		info, err := st.Info(ctx)
		require.NoError(t, err)
		out[i] = info.State.LastSeq
	}
	return out
}

// shardedIDs are two ids of one shard and one of another among n, and
// their shards.
func shardedIDs(t *testing.T, n int) (a, b, c string, qa, qc int) {
	t.Helper()
	first := map[int]string{}
	for i := 0; a == ""; i++ {
		id := fmt.Sprintf("order.%d", i)
		q := wire.ShardOf(id, n)
		if f, ok := first[q]; ok {
			a, b, qa = f, id, q
		} else {
			first[q] = id
		}
	}
	for i := 0; ; i++ {
		if id := fmt.Sprintf("user %d", i); wire.ShardOf(id, n) != qa {
			return a, b, id, qa, wire.ShardOf(id, n)
		}
	}
}

// TestCLI_ShardedWorld: world add --shards makes a sharded world, and
// world ls, world info and stat --json say its kind and shards. Every
// ownership command acts on an id's shard and names it: the claim of a
// second id of the same shard is held-by the first's node at the same
// epoch and shard, an id of another shard is independent, and the
// shard's epochs never repeat through release, claim, seize and renew,
// also when the shard is named with --shard. A --shard the world does not
// have is a usage error that writes nothing. ls --shards lists the
// shards, paged; stat ID counts the id's posts and names its shard's
// owner; drain of an id is refused, writing nothing.
func TestCLI_ShardedWorld(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	url := env.URL
	perID := env.World(t, world.Config{}).Name
	const n = 8
	const sw = "sharded"
	for _, s := range []struct {
		args   []string
		code   int
		prefix string
		has    []string
	}{
		{[]string{"world", "add", "bad", "--shards", "0"}, 2, "", []string{"1..1024"}},
		{[]string{"world", "add", "bad", "--shards", "1025"}, 2, "", []string{"1..1024"}},
		{[]string{"world", "add", "bad", "--shards", "4", "--partitions", "4"}, 1, "", []string{"partitions", "not both"}},
		{[]string{"world", "info", "bad"}, 1, "", []string{"unknown world"}},
		{[]string{"world", "add", sw, "--shards", "8"}, 0, "created world=" + sw + " ", []string{" kind=sharded shards=8", " partitions=0 "}},
		{[]string{"world", "add", sw, "--shards", "8"}, 0, "exists world=" + sw + " ", nil},
		{[]string{"world", "add", sw}, 0, "exists world=" + sw + " ", []string{" kind=sharded shards=8"}},
		{[]string{"world", "add", sw, "--shards", "4"}, 1, "", []string{"shards 8 (asked 4)"}},
		{[]string{"world", "info", sw}, 0, "world name=" + sw + " ", []string{" kind=sharded shards=8"}},
		{[]string{"world", "info", perID}, 0, "world name=" + perID + " ", []string{" kind=per-id shards=0"}},
	} {
		r := cli(t, url, "default", s.args...)
		require.Equal(t, s.code, r.code, "%v: %+v", s.args, r)
		require.True(t, strings.HasPrefix(r.out, s.prefix), "%v: got %q, want prefix %q", s.args, r.out, s.prefix)
		for _, h := range s.has {
			require.Contains(t, r.out+r.err, h, "%v", s.args)
		}
	}
	r := cli(t, url, "default", "world", "ls")
	require.Equal(t, 0, r.code, "%+v", r)
	require.Contains(t, r.out, "world name="+sw+" replicas=1 storage=file kind=sharded shards=8\n")
	require.Contains(t, r.out, "world name="+perID+" replicas=1 storage=file\n", "a per-id world's line as it was")
	kinds := map[string]string{}
	for _, m := range jsonLines(t, cli(t, url, "default", "world", "ls", "--json")) {
		kinds[m["name"].(string)] = fmt.Sprint(m["kind"], " ", m["shards"])
	}
	require.Equal(t, map[string]string{sw: "sharded 8", perID: "per-id 0"}, kinds)
	m := jsonOf(t, cli(t, url, sw, "world", "info", "--json"))
	require.Equal(t, "sharded", m["kind"])
	require.EqualValues(t, n, m["shards"])

	a, b, c, q, qc := shardedIDs(t, n)
	sh := fmt.Sprintf(" shard=%d", q)
	sq := fmt.Sprint(q)
	epochs := []uint64{}
	for _, s := range []struct {
		args   []string
		code   int
		prefix string
		epoch  uint64 // a new epoch of shard q
	}{
		{[]string{"owner", a}, 11, "free epoch=0" + sh, 0},
		{[]string{"claim", a, "--node", "n1"}, 0, "claimed epoch=1" + sh + " expires=", 1},
		{[]string{"claim", b, "--node", "n2"}, 10, "held-by node=n1 epoch=1" + sh + " expires=", 0},
		{[]string{"claim", c, "--node", "n2"}, 0, fmt.Sprintf("claimed epoch=1 shard=%d expires=", qc), 0},
		{[]string{"owner", b}, 0, "owned-by node=n1 epoch=1" + sh + " expires=", 0},
		{[]string{"owner", "--shard", sq}, 0, "owned-by node=n1 epoch=1" + sh + " expires=", 0},
		{[]string{"guard", b, "--node", "n1", "--epoch", "1"}, 0, "owner epoch=1" + sh + " expires=", 0},
		{[]string{"renew", b, "--node", "n2"}, 10, "held-by node=n1 epoch=1" + sh, 0},
		{[]string{"release", b, "--node", "n2"}, 12, "not-owner node=n1 epoch=1" + sh, 0},
		{[]string{"release", b, "--node", "n1"}, 0, "released" + sh, 0},
		{[]string{"release", a, "--node", "n1"}, 11, "free epoch=1" + sh, 0},
		{[]string{"claim", b, "--node", "n2"}, 0, "claimed epoch=2" + sh, 2},
		{[]string{"seize", a, "--node", "n3"}, 15, "live node=n2 epoch=2" + sh, 0},
		{[]string{"seize", a, "--node", "n3", "--force"}, 0, "seized epoch=3" + sh, 3},
		{[]string{"guard", b, "--node", "n2", "--epoch", "2"}, 13, "fenced current=3" + sh, 0},
		{[]string{"renew", "--shard", sq, "--node", "n3"}, 0, "renewed expires=", 0},
		{[]string{"release", "--shard", sq, "--node", "n3"}, 0, "released" + sh, 0},
		{[]string{"claim", "--shard", sq, "--node", "n1"}, 0, "claimed epoch=4" + sh, 4},
		{[]string{"guard", "--shard", sq, "--node", "n1", "--epoch", "99"}, 13, "fenced current=4 never_issued" + sh, 0},
		{[]string{"owner", c}, 0, fmt.Sprintf("owned-by node=n2 epoch=1 shard=%d ", qc), 0},
	} {
		r := cli(t, url, sw, s.args...)
		require.Equal(t, s.code, r.code, "%v: %+v", s.args, r)
		require.True(t, strings.HasPrefix(r.out, s.prefix), "%v: got %q, want prefix %q", s.args, r.out, s.prefix)
		if s.epoch != 0 {
			epochs = append(epochs, s.epoch)
		}
	}
	require.Equal(t, []uint64{1, 2, 3, 4}, epochs)
	m = jsonOf(t, cli(t, url, sw, "claim", b, "--node", "n2", "--json"))
	require.Equal(t, "held-by", m["outcome"])
	require.Equal(t, "n1", m["node"])
	require.EqualValues(t, 4, m["epoch"])
	require.EqualValues(t, q, m["shard"])

	// A shard the world does not have: a usage error, nothing written.
	before := [2][2]uint64{lastSeqs(t, env, sw), lastSeqs(t, env, perID)}
	for _, s := range []struct {
		world string
		args  []string
		has   string
	}{
		{sw, []string{"claim", "--shard", "8", "--node", "n1"}, "shard 8 is outside 0..7"},
		{sw, []string{"seize", "--shard", "100", "--node", "n1", "--force"}, "shard 100 is outside 0..7"},
		{sw, []string{"claim", "--shard", "-1", "--node", "n1"}, "want a shard number"},
		{sw, []string{"claim", "--shard", "x", "--node", "n1"}, "want a shard number"},
		{sw, []string{"claim", a, "--shard", "1", "--node", "n1"}, "not both"},
		{sw, []string{"claim", "--shard", "1"}, "--node is required"},
		{sw, []string{"guard", "--shard", "1", "--node", "n1"}, "--epoch is required"},
		{perID, []string{"claim", "--shard", "0", "--node", "n1"}, "per-id world"},
		{perID, []string{"release", "--shard", "0", "--node", "n1"}, "per-id world"},
		{perID, []string{"ls", "--shards"}, "per-id world"},
		{sw, []string{"ls", "--shards", "--with-mail"}, "--with-mail"},
		{sw, []string{"ls", "--shards", "--after", "x"}, "shard number"},
		{sw, []string{"drain", "--shard", "8", "--node", "n1", "--epoch", "1"}, "shard 8 is outside 0..7"},
		{sw, []string{"drain", a, "--shard", "1", "--node", "n1", "--epoch", "1"}, "not both"},
		{perID, []string{"drain", "--shard", "0", "--node", "n1", "--epoch", "1"}, "per-id world"},
	} {
		r := cli(t, url, s.world, s.args...)
		require.Equal(t, 2, r.code, "%v: %+v", s.args, r)
		require.Contains(t, r.err, s.has, "%v", s.args)
		require.Empty(t, r.out, "%v", s.args)
	}
	require.Equal(t, before, [2][2]uint64{lastSeqs(t, env, sw), lastSeqs(t, env, perID)}, "a refused --shard wrote nothing")

	// ls --shards: every shard in order, paged.
	shards := jsonLines(t, cli(t, url, sw, "ls", "--shards", "--json"))
	require.Len(t, shards, n+1)
	for i, m := range shards[:n] {
		require.Equal(t, "shard", m["outcome"])
		require.EqualValues(t, i, m["shard"])
		switch i {
		case q:
			require.Equal(t, "held", m["state"])
			require.Equal(t, "n1", m["node"])
			require.EqualValues(t, 4, m["epoch"])
		case qc:
			require.Equal(t, "held", m["state"])
			require.Equal(t, "n2", m["node"])
		default:
			require.Equal(t, "free", m["state"])
			require.EqualValues(t, 0, m["epoch"])
		}
	}
	require.Equal(t, "listed", shards[n]["outcome"])
	require.EqualValues(t, n, shards[n]["count"])
	r = cli(t, url, sw, "ls", "--shards", "--limit", "3")
	require.Equal(t, 0, r.code, "%+v", r)
	require.True(t, strings.HasPrefix(r.out, "shard shard=0 state="), r.out)
	require.True(t, strings.HasSuffix(r.out, "listed count=3 more next=2\n"), r.out)
	r = cli(t, url, sw, "ls", "--shards", "--limit", "3", "--after", "2")
	require.True(t, strings.HasPrefix(r.out, "shard shard=3 state="), r.out)
	r = cli(t, url, sw, "ls", "--shards", "--held-by", "n2")
	require.Equal(t, fmt.Sprintf("shard shard=%d state=held node=n2 epoch=1", qc), strings.SplitN(r.out, " expires=", 2)[0])

	// Mail: stat ID counts the id's posts and names its shard's owner.
	for _, id := range []string{a, a, b} {
		r := cli(t, url, sw, "send", id, "hello")
		require.Equal(t, 0, r.code, "%+v", r)
	}
	r = cli(t, url, sw, "stat", a)
	require.Equal(t, 0, r.code, "%+v", r)
	require.True(t, strings.HasPrefix(r.out, "stat depth=2 oldest="), r.out)
	require.Contains(t, r.out, sh+" node=n1 epoch=4 ")
	m = jsonOf(t, cli(t, url, sw, "stat", b, "--json"))
	require.EqualValues(t, 1, m["depth"])
	require.EqualValues(t, q, m["shard"])
	require.Equal(t, "n1", m["node"])
	m = jsonOf(t, cli(t, url, sw, "stat", "--json"))
	require.Equal(t, "sharded", m["kind"])
	require.EqualValues(t, n, m["shards"])
	require.EqualValues(t, 2, m["ids"])
	require.EqualValues(t, 3, m["depth"])
	m = jsonOf(t, cli(t, url, perID, "stat", "--json"))
	require.Equal(t, "per-id", m["kind"])
	require.EqualValues(t, 0, m["shards"])
	ids, _ := lsJSON(t, url, sw, "--with-mail")
	require.Len(t, ids, 2)
	for _, m := range ids {
		require.EqualValues(t, q, m["shard"], "%v", m)
		require.Equal(t, "n1", m["node"], "%v", m)
	}
	require.ElementsMatch(t, []string{a, b}, idsOf(ids))

	// drain of an id: the drain of its shard, by the shard's holder (n1 at
	// epoch 4): every message of the shard, each with its id, in order.
	before[0] = lastSeqs(t, env, sw)
	m = jsonOf(t, cli(t, url, sw, "drain", a, "--node", "n2", "--epoch", "4", "--json"))
	require.Equal(t, "held-by", m["outcome"])
	require.Equal(t, before[0], lastSeqs(t, env, sw), "a refused drain wrote nothing")
	r = cli(t, url, sw, "drain", a, "--node", "n1", "--epoch", "4", "--json")
	require.Equal(t, 0, r.code, "%+v", r)
	lines := jsonLines(t, r)
	require.Len(t, lines, 4, "%+v", r)
	var got []string
	for _, m := range lines[:3] {
		require.Equal(t, "message", m["outcome"])
		require.Equal(t, "hello", m["body"])
		require.EqualValues(t, 4, m["epoch"])
		got = append(got, m["id"].(string))
	}
	require.Equal(t, []string{a, a, b}, got, "the shard's messages in posting order, each with its id")
	require.Equal(t, "done", lines[3]["outcome"])
	require.EqualValues(t, 3, lines[3]["count"])
	require.EqualValues(t, q, lines[3]["shard"])
	r = cli(t, url, sw, "drain", "--shard", sq, "--node", "n1", "--epoch", "4")
	require.Equal(t, 0, r.code, "%+v", r)
	require.Equal(t, fmt.Sprintf("done count=0 dead=0 shard=%d\n", q), r.out, "the first drain committed")
	r = cli(t, url, sw, "stat", a)
	require.True(t, strings.HasPrefix(r.out, "stat depth=0 "), r.out)
}
