package main_test

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/wire"
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

// TestCLI_WorldAdd_ExistsNamesGivenFlagsOnly: world add of an existing
// world compares, and names in its refusal, only the settings whose flags
// were given; the defaults of flags left out are not "asked".
func TestCLI_WorldAdd_ExistsNamesGivenFlagsOnly(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	r := cli(t, env.URL, "default", "world", "add", "given", "--default-ttl", "30s", "--max-deliveries", "3")
	require.Equal(t, 0, r.code, r.err)

	r = cli(t, env.URL, "default", "world", "add", "given", "--max-deliveries", "4")
	require.Equal(t, 1, r.code, "%q %q", r.out, r.err)
	require.Contains(t, r.err, "it has max_deliveries 3 (asked 4); remove it first")
	require.NotContains(t, r.err, "default_ttl")
	require.NotContains(t, r.err, "asked 10s")

	r = cli(t, env.URL, "default", "world", "add", "given", "--max-deliveries", "3")
	require.Equal(t, 0, r.code, r.err)
	require.Contains(t, r.out, "exists world=given ")

	r = cli(t, env.URL, "default", "world", "add", "given", "--max-msg-size", "100", "--default-ttl", "30s")
	require.Equal(t, 1, r.code, "%q %q", r.out, r.err)
	require.Contains(t, r.err, "it has max_body 1040384 (asked 100); remove it first")
}

// TestCLI_WorldAdd_DefaultPartitions: a new single-replica world without
// --partitions gets world.DefaultPartitions, --partitions 0 none; adding
// an existing world compares its partitions only when --partitions is
// given, so a world made before the default (none) still "exists".
func TestCLI_WorldAdd_DefaultPartitions(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	r := cli(t, env.URL, "default", "world", "add", "parted")
	require.Equal(t, 0, r.code, r.err)
	require.Contains(t, r.out, "created world=parted ")
	require.Contains(t, r.out, fmt.Sprintf(" partitions=%d", world.DefaultPartitions))

	r = cli(t, env.URL, "default", "world", "add", "whole", "--partitions", "0")
	require.Equal(t, 0, r.code, r.err)
	require.Contains(t, r.out, " partitions=0")
	w, err := world.Open(testutil.Ctx(t, 5*time.Second), env.Client.JetStream(), "whole")
	require.NoError(t, err)
	require.Zero(t, w.Config.Partitions)

	r = cli(t, env.URL, "default", "world", "add", "whole")
	require.Equal(t, 0, r.code, r.err)
	require.Contains(t, r.out, "exists world=whole ")
	require.Contains(t, r.out, " partitions=0")

	r = cli(t, env.URL, "default", "world", "add", "whole", "--partitions", "64")
	require.Equal(t, 1, r.code, "%q %q", r.out, r.err)
	require.Contains(t, r.err, "it has partitions 0 (asked 64)")
}

// TestCLI_Stat_OldestAge: stat prints the oldest message's timestamp
// (oldest, as before) and its age (oldest_age, docs/contract.md section 2's "oldest
// message age"), in text and in --json; an empty mailbox has neither.
func TestCLI_Stat_OldestAge(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{MinTTL: time.Second})
	r := cli(t, env.URL, w.Name, "stat", "x")
	require.Equal(t, 0, r.code, r.err)
	require.NotContains(t, r.out, "oldest")

	require.Equal(t, 0, cli(t, env.URL, w.Name, "send", "x", "hello").code)
	r = cli(t, env.URL, w.Name, "stat", "x")
	require.Equal(t, 0, r.code, r.err)
	require.Regexp(t, `^stat depth=1 oldest=\S+ oldest_age=\S+s cursor=`, r.out)

	r = cli(t, env.URL, w.Name, "stat", "x", "--json")
	require.Equal(t, 0, r.code, r.err)
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.out), &m))
	oldest, err := time.Parse(time.RFC3339Nano, m["oldest"].(string))
	require.NoError(t, err)
	age, err := time.ParseDuration(m["oldest_age"].(string))
	require.NoError(t, err)
	require.GreaterOrEqual(t, age, time.Duration(0))
	require.Less(t, age, time.Minute)
	require.WithinDuration(t, time.Now().Add(-age), oldest, 10*time.Second)
}

// TestCLI_Claim_EpochsExhausted: a claim over a record at epoch 2^64-1 is
// a clear error (exit 1), not a "corrupt record" one.
func TestCLI_Claim_EpochsExhausted(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{MinTTL: time.Second})
	ctx := testutil.Ctx(t, time.Minute)
	past := time.Now().Add(-time.Hour)
	b, err := wire.EncodeRecord(wire.Record{Epoch: math.MaxUint64, State: wire.StateFree, Acquired: past, Expires: past})
	require.NoError(t, err)
	_, err = handles.Of(w).KV.Put(ctx, wire.RecordKey("x"), b)
	require.NoError(t, err)
	r := cli(t, env.URL, w.Name, "claim", "x", "--node", "n1")
	require.Equal(t, 1, r.code, "%q %q", r.out, r.err)
	require.Contains(t, r.err, "epochs exhausted")
	require.NotContains(t, r.err, "corrupt")
	r = cli(t, env.URL, w.Name, "owner", "x")
	require.Equal(t, 11, r.code, r.err)
	require.Equal(t, "free epoch=18446744073709551615\n", r.out)
}

// TestCLI_ServerDown_Hint: when no server answers, the CLI's error asks
// whether fencepostd is running (a hint of the CLI's, in text and
// --json); the library's error does not say it.
func TestCLI_ServerDown_Hint(t *testing.T) {
	r := cli(t, "nats://127.0.0.1:1", "default", "owner", "x")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.err, "no servers available")
	require.Contains(t, r.err, "is fencepostd running?")

	r = cli(t, "nats://127.0.0.1:1", "default", "owner", "x", "--json")
	require.Equal(t, 1, r.code)
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.out), &m))
	require.Equal(t, "error", m["outcome"])
	require.Contains(t, m["error"], "is fencepostd running?")

	_, err := client.Connect("nats://127.0.0.1:1", client.WithTimeout(time.Second))
	require.Error(t, err)
	require.NotContains(t, err.Error(), "fencepostd")
}

// TestCLI_World_NonASCIIName: a world name with a non-ASCII character is
// refused naming that character, not the first byte of its UTF-8.
func TestCLI_World_NonASCIIName(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	r := cli(t, env.URL, "default", "world", "add", "café")
	require.Equal(t, 1, r.code, "%q %q", r.out, r.err)
	require.Contains(t, r.err, `"café" has 'é' at byte 3`)
	r = cli(t, env.URL, "é", "owner", "x")
	require.Equal(t, 1, r.code, "%q %q", r.out, r.err)
	require.Contains(t, r.err, `has 'é' at byte 0`)
	require.NotContains(t, r.err, "Ã")
}

// TestCLI_Seize_Lapsed: seize of an id whose lease lapsed answers seized
// with the next epoch, without --force (docs/contract.md section 2: the takeover of a
// crashed owner; docs/design.md section 5), and the old holder is fenced.
func TestCLI_Seize_Lapsed(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{MinTTL: 10 * time.Millisecond})
	r := cli(t, env.URL, w.Name, "claim", "x", "--node", "n1", "--ttl", "200ms")
	require.Equal(t, 0, r.code, "%+v", r)
	require.Eventually(t, func() bool { return cli(t, env.URL, w.Name, "owner", "x").code == 11 }, 10*time.Second, 20*time.Millisecond,
		"the lease lapses")
	r = cli(t, env.URL, w.Name, "seize", "x", "--node", "n2")
	require.Equal(t, 0, r.code, "%+v", r)
	require.True(t, strings.HasPrefix(r.out, "seized epoch=2 "), r.out)
	r = cli(t, env.URL, w.Name, "guard", "x", "--node", "n1", "--epoch", "1")
	require.Equal(t, 13, r.code, "%+v", r)
	require.Equal(t, "fenced current=2\n", r.out)

	h := cli(t, env.URL, w.Name, "help", "seize")
	require.Contains(t, h.out, "lapsed", "seize's help says a lapsed id is seized")
}
