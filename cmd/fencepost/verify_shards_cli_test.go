package main_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/testkit/testutil"
)

// TestVerify_Shards_Passes: `fencepost verify --shards 4` on an embedded
// server makes its scratch world sharded, its owner processes serve shards
// (kills, stops, seizes of a shard and connection cuts), and every
// invariant holds: nothing lost, no stale commit (per shard, each cursor
// write's newly covered messages delivered under its epoch), per-id order,
// ownership linearizable, calls answered by the shards' holders after a
// shard cursor covering them, timers fired once and never early, cancelled
// ones never; the history file checks again to the same
// verdict and names the shards. --shards out of range is a usage error
// that creates nothing.
func TestVerify_Shards_Passes(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	names := streamNames(t, env.Client)
	dir := t.TempDir()
	hist := filepath.Join(dir, "h.jsonl")
	cmd := exec.Command(bin, "verify", "--shards", "4", "--duration", "8s", "--ttl", "1s", "--ids", "6", "--history", hist, "--json")
	cmd.Env = append(os.Environ(), "NATS_URL="+env.URL)
	cmd.Dir = dir
	var so, se strings.Builder
	cmd.Stdout, cmd.Stderr = &so, &se
	start := time.Now()
	require.NoError(t, cmd.Run(), "stdout: %s\nstderr: %s", so.String(), se.String())
	t.Logf("verify --shards 4 took %v; stderr:\n%s", time.Since(start), se.String())

	var out struct {
		Outcome    string
		World      string
		Shards     int
		Invariants []struct {
			Name      string
			OK        bool
			Count, Of int
		}
		Faults  map[string]int
		Figures map[string]float64
	}
	require.NoError(t, json.Unmarshal([]byte(so.String()), &out), so.String())
	require.Equal(t, "passed", out.Outcome, so.String())
	require.Equal(t, 4, out.Shards)
	require.Len(t, out.Invariants, 15)
	for _, inv := range out.Invariants {
		require.True(t, inv.OK, "%+v", inv)
		require.Positive(t, inv.Of, "%s checked nothing", inv.Name)
	}
	require.Positive(t, out.Faults["kill"]+out.Faults["stop"]+out.Faults["seize"], "no fault injected: %v", out.Faults)
	require.Positive(t, out.Figures["takeovers"], "%v", out.Figures)
	requireCallsTimers(t, out.Figures)
	require.Contains(t, se.String(), "(replicas 1, shards 4)")
	require.ElementsMatch(t, names, streamNames(t, env.Client), "streams left behind")

	r := cli(t, env.URL, "", "verify", "--check", hist)
	require.Equal(t, 0, r.code, "%+v", r)
	require.Regexp(t, `(?m)^passed world=`+out.World+` replicas=1 shards=4 `, r.out)

	r = cli(t, env.URL, "", "verify", "--shards", "1025", "--duration", "5s")
	require.Equal(t, 2, r.code, "%+v", r)
	require.Contains(t, r.err, "--shards 1025: give 1 to 1024")
	require.ElementsMatch(t, names, streamNames(t, env.Client), "a refused run created something")
}
