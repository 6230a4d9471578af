package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/server"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// snapshot is everything a world holds, as JetStream reports it: its
// three streams' settings and state, and every key of its bucket with its
// revision and value.
type snapshot struct {
	Streams map[string]jetstream.StreamInfo
	Keys    map[string]string
}

func takeSnapshot(t *testing.T, c *client.Client, w *client.World) snapshot {
	t.Helper()
	ctx := testutil.Ctx(t, 10*time.Second)
	s := snapshot{Streams: map[string]jetstream.StreamInfo{}, Keys: map[string]string{}}
	timers, err := c.JetStream().Stream(ctx, wire.TimerStream(w.Name))
	require.NoError(t, err)
	for _, st := range []jetstream.Stream{handles.Of(w).Bucket, handles.Of(w).Mailbox, timers} {
		info, err := st.Info(ctx, jetstream.WithSubjectFilter(">"))
		require.NoError(t, err)
		info.Created, info.TimeStamp, info.Cluster = time.Time{}, time.Time{}, nil
		info.State.FirstTime, info.State.LastTime = time.Time{}, time.Time{}
		for _, so := range info.Sources {
			so.Active = 0 // the time since the source was last heard from
		}
		s.Streams[info.Config.Name] = *info
	}
	keys, err := handles.Of(w).KV.ListKeys(ctx)
	require.NoError(t, err)
	for k := range keys.Keys() {
		e, err := handles.Of(w).KV.Get(ctx, k)
		require.NoError(t, err)
		s.Keys[k] = fmt.Sprintf("%s @%d", e.Value(), e.Revision())
	}
	return s
}

func streamNames(t *testing.T, c *client.Client) []string {
	t.Helper()
	var out []string
	names := c.JetStream().StreamNames(testutil.Ctx(t, 10*time.Second))
	for n := range names.Name() {
		out = append(out, n)
	}
	require.NoError(t, names.Err())
	return out
}

// TestVerify_Cluster_PassesAndLeavesOtherWorldsAlone: `fencepost verify`
// against an embedded 3-node cluster, with every fault, passes (every
// invariant holds, each fault was injected, ids were taken over; its
// calls were answered after their commits by the handler calls of their
// messages, its timers fired once, none early, none of those cancelled),
// on an R3 world it removes afterwards; a world that was there before, with mail,
// a holding and a cursor, is exactly as it was (its streams' settings and
// state, every key and revision of its bucket); the history file it wrote
// checks again to the same verdict (--check).
func TestVerify_Cluster_PassesAndLeavesOtherWorldsAlone(t *testing.T) {
	env := testutil.Start(t, testutil.Target{Name: "cluster-R3", Cluster: true})
	by := env.World(t, world.Config{})
	ctx := testutil.Ctx(t, 30*time.Second)
	for _, id := range []string{"a", "a", "a", "b", "b"} {
		_, err := by.Queue.Send(ctx, id, []byte("mail for "+id))
		require.NoError(t, err)
	}
	_, err := by.Ownership.Claim(ctx, "a", "bystander-1", time.Hour)
	require.NoError(t, err)
	l, err := by.Ownership.Claim(ctx, "b", "bystander-2", time.Hour)
	require.NoError(t, err)
	_, err = by.Drainer.Drain(ctx, "b", l.Node, l.Epoch, func(context.Context, drain.Message) error { return nil }, drain.WithMax(1))
	require.NoError(t, err)
	before, names := takeSnapshot(t, env.Client, by), streamNames(t, env.Client)

	dir := t.TempDir()
	hist := filepath.Join(dir, "h.jsonl")
	cmd := exec.Command(bin, "verify", "--duration", "14s", "--ttl", "1s", "--ids", "4", "--history", hist, "--json")
	cmd.Env = append(os.Environ(), "NATS_URL="+env.URL)
	cmd.Dir = dir
	var so, se strings.Builder
	cmd.Stdout, cmd.Stderr = &so, &se
	start := time.Now()
	require.NoError(t, cmd.Run(), "stdout: %s\nstderr: %s", so.String(), se.String())
	t.Logf("verify took %v; stderr:\n%s", time.Since(start), se.String())

	var out struct {
		Outcome    string
		World      string
		Replicas   int
		History    string
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
	require.Equal(t, 3, out.Replicas)
	require.Equal(t, hist, out.History)
	require.True(t, strings.HasPrefix(out.World, "verify-"), out.World)
	require.Len(t, out.Invariants, 15)
	for _, inv := range out.Invariants {
		require.True(t, inv.OK, "%+v", inv)
		require.Positive(t, inv.Of, "%s checked nothing", inv.Name)
	}
	for _, f := range []string{"kill", "stop", "seize", "cut"} {
		require.Positive(t, out.Faults[f], "fault %s never injected: %v", f, out.Faults)
	}
	require.Positive(t, out.Figures["takeovers"], "%v", out.Figures)
	requireCallsTimers(t, out.Figures)
	require.Zero(t, out.Figures["commits_unattributed"], "%v", out.Figures)

	require.Equal(t, before, takeSnapshot(t, env.Client, by), "the other world changed")
	require.ElementsMatch(t, names, streamNames(t, env.Client), "streams left behind or removed")

	r := cli(t, env.URL, "", "verify", "--check", hist)
	require.Equal(t, 0, r.code, "%+v", r)
	require.Regexp(t, `(?m)^passed world=`+out.World+` replicas=3 `, r.out)
	require.Equal(t, 15, strings.Count(r.out, "\nok ")+boolInt(strings.HasPrefix(r.out, "ok ")), r.out)
	require.Regexp(t, `(?m)^ok +call_uncommitted +0 of [1-9][0-9]* answers: came before a commit covering the call was stored$`, r.out)
	require.Regexp(t, `(?m)^ok +timer_early +0 of [1-9][0-9]* timers fired: `, r.out)
}

// requireCallsTimers: a verify run made calls, most of them answered, and
// set timers, some of them cancelled, that fired; none of its calls or
// timers had an outcome it did not count.
func requireCallsTimers(t *testing.T, figures map[string]float64) {
	t.Helper()
	require.Positive(t, figures["calls_replied"], "%v", figures)
	require.Greater(t, figures["calls_replied"], figures["calls"]/2, "%v", figures)
	require.Positive(t, figures["timers_fired"], "%v", figures)
	require.Positive(t, figures["timers_cancelled"], "%v", figures)
	require.Equal(t, figures["calls"], figures["calls_replied"]+figures["calls_failed"]+figures["calls_timeout"]+figures["calls_unknown"]+figures["calls_refused"], "%v", figures)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// A history of one producer's three messages to v-0: delivered to a/1,
// then (a takeover) to b/2, with their commits.
const verifyHistory = `{"t":"meta","world":"verify-00000000","replicas":3,"drained":true,"follower_current":true}
{"t":"send","producer":"p0","id":"v-0","key":"k1","outcome":"posted","seq":1,"invoked":"2026-12-01T05:00:00Z","returned":"2026-12-01T05:00:00.001Z"}
{"t":"send","producer":"p0","id":"v-0","key":"k2","outcome":"posted","seq":2,"invoked":"2026-12-01T05:00:00.002Z","returned":"2026-12-01T05:00:00.003Z"}
{"t":"send","producer":"p0","id":"v-0","key":"k3","outcome":"posted","seq":3,"invoked":"2026-12-01T05:00:00.004Z","returned":"2026-12-01T05:00:00.005Z"}
{"t":"delivery","id":"v-0","key":"k1","seq":1,"node":"a","epoch":1,"revision":5,"at":"2026-12-01T05:00:00.010Z"}
LOST{"t":"delivery","id":"v-0","key":"k2","seq":2,"node":"a","epoch":1,"revision":5,"at":"2026-12-01T05:00:00.020Z"}
{"t":"delivery","id":"v-0","key":"k3","seq":3,"node":"b","epoch":2,"revision":8,"at":"2026-12-01T05:00:00.030Z"}
{"t":"commit","id":"v-0","node":"a","epoch":1,"revision":5,"cursor":2,"bucket_seq":7,"at":"2026-12-01T05:00:00.025Z"}
{"t":"commit","id":"v-0","node":"b","epoch":2,"revision":8,"cursor":3,"bucket_seq":9,"at":"2026-12-01T05:00:00.035Z"}
STALE{"t":"commit","id":"v-0","node":"a","epoch":1,"revision":5,"cursor":3,"bucket_seq":10,"at":"2026-12-01T05:00:00.036Z"}
`

// TestVerify_BrokenHistory: the checker path of verify (--check reads a
// history file and checks it as a run's) reports a lost message and a
// stale commit, one line each, and exits 1; the same history without
// them passes, exit 0.
func TestVerify_BrokenHistory(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, lost, stale bool) string {
		var lines []string
		for _, l := range strings.SplitAfter(verifyHistory, "\n") {
			switch {
			case strings.HasPrefix(l, "LOST"):
				if lost {
					continue
				}
				l = strings.TrimPrefix(l, "LOST")
			case strings.HasPrefix(l, "STALE"):
				if !stale {
					continue
				}
				l = strings.TrimPrefix(l, "STALE")
			}
			lines = append(lines, l)
		}
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(strings.Join(lines, "")), 0o600))
		return p
	}
	good, bad := write("good.jsonl", false, false), write("bad.jsonl", true, true)

	r := cli(t, nowhere, noWorld, "verify", "--check", good)
	require.Equal(t, 0, r.code, "%+v", r)
	require.Contains(t, r.out, "ok        lost              0 of 3 posted")
	require.Contains(t, r.out, "\npassed world=verify-00000000 ")

	r = cli(t, nowhere, noWorld, "verify", "--check", bad)
	require.Equal(t, 1, r.code, "%+v", r)
	require.Contains(t, r.out, "VIOLATED  lost              1 of 3 posted: acknowledged sends never delivered\n")
	require.Contains(t, r.out, "VIOLATED  stale_commits     1 of 3 commits: stored after the record had named a newer epoch\n")
	require.Contains(t, r.out, "ok        order ")
	require.Contains(t, r.out, "\nviolated world=verify-00000000 ")
	require.Contains(t, r.err, `lost: v-0 key "k2" posted at seq 2`)
	require.Contains(t, r.err, "stale commit: v-0: a/1 stored cursor 3 at bucket seq 10")

	r = cli(t, nowhere, noWorld, "verify", "--check", bad, "--json")
	require.Equal(t, 1, r.code, "%+v", r)
	var out struct {
		Outcome    string
		Invariants []struct {
			Name  string
			OK    bool
			Count int
		}
	}
	require.NoError(t, json.Unmarshal([]byte(r.out), &out), r.out)
	require.Equal(t, "violated", out.Outcome)
	got := map[string]int{}
	for _, inv := range out.Invariants {
		got[inv.Name] = inv.Count
	}
	require.Equal(t, map[string]int{"lost": 1, "unexpected": 0, "order": 0, "stale_deliveries": 0, "stale_commits": 1,
		"unfenced_commits": 0, "cursor_back": 0, "linearizable": 0, "call_answers": 0, "call_uncommitted": 0, "call_failed": 0,
		"timer_early": 0, "timer_twice": 0, "timer_cancelled": 0, "timer_order": 0}, got)

	r = cli(t, nowhere, noWorld, "verify", "--check", filepath.Join(dir, "missing.jsonl"))
	require.Equal(t, 1, r.code, "%+v", r)
}

// TestVerify_UsageErrors_CreateNothing: bad flags are usage errors (exit
// 2) that say what is wrong, given before verify connects, and a history
// file that cannot be written is an error found before it creates
// anything: the server's streams are the same afterwards.
func TestVerify_UsageErrors_CreateNothing(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{})
	names := streamNames(t, env.Client)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--duration", "1s"}, "--duration 1s: give 5s to 24h0m0s"},
		{[]string{"--duration", "25h"}, "--duration 25h0m0s: give 5s to 24h0m0s"},
		{[]string{"--duration", "soon"}, "--duration"},
		{[]string{"--ids", "0"}, "--ids 0: give 1 to 1000"},
		{[]string{"--ids", "1001"}, "--ids 1001: give 1 to 1000"},
		{[]string{"--faults", "kill,explode"}, `unknown fault "explode": use kill, stop, seize, cut, all or none`},
		{[]string{"--replicas", "2"}, "replicas 2: use 1, 3 or 5"},
		{[]string{"--owners", "1"}, "owners 1 is outside 2..16"},
		{[]string{"--ttl", "10ms"}, "ttl 10ms is outside 500ms..1m0s"},
		{[]string{"--world", w.Name}, "verify runs on a scratch world of its own; drop --world"},
		{[]string{"extra"}, "takes no arguments, got 1"},
	} {
		r := cli(t, env.URL, "", append([]string{"verify"}, c.args...)...)
		require.Equal(t, 2, r.code, "%v: %+v", c.args, r)
		require.Contains(t, r.err, c.want, c.args)
		require.Contains(t, r.err, "usage: fencepost verify", c.args)
		require.Empty(t, r.out, c.args)
	}
	// A history file that cannot be written is an error (exit 1) found
	// before anything is created.
	r := cli(t, env.URL, "", "verify", "--history", filepath.Join(t.TempDir(), "no-such-dir", "h.jsonl"))
	require.Equal(t, 1, r.code, "%+v", r)
	require.Contains(t, r.err, "the history file: ")
	require.ElementsMatch(t, names, streamNames(t, env.Client))
}

// TestVerify_Interrupted_RemovesWorld: Ctrl-C (SIGINT) in the middle of a
// run stops it: exit 1, the scratch world removed, the owners ended, the
// history so far written, by default to WORLD.jsonl in the OS temp dir
// ($TMPDIR), never into the working directory.
func TestVerify_Interrupted_RemovesWorld(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	names := streamNames(t, env.Client)
	dir, tmp := t.TempDir(), t.TempDir()
	cmd := exec.Command(bin, "verify", "--duration", "10m", "--ttl", "1s", "--ids", "2")
	cmd.Env = append(os.Environ(), "NATS_URL="+env.URL, "TMPDIR="+tmp)
	cmd.Dir = dir
	stderr := newSyncBuffer()
	var so strings.Builder
	cmd.Stdout, cmd.Stderr = &so, stderr
	require.NoError(t, cmd.Start())
	testutil.WaitFor(t, 60*time.Second, "verify runs its faults", func() bool { return strings.Contains(stderr.String(), "verify: fault ") })
	require.NotEmpty(t, ownerProcs(t), "no owner process found")
	require.Contains(t, stderr.String(), fmt.Sprintf(" created (replicas 1, partitions %d)\n", world.DefaultPartitions), "a single server takes R1, with world add's partitions")
	require.Greater(t, len(streamNames(t, env.Client)), len(names), "no scratch world")
	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	err := cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "stdout %s\nstderr %s", so.String(), stderr.String())
	require.Equal(t, 1, ee.ExitCode(), stderr.String())
	inDir, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	require.NoError(t, err)
	require.Empty(t, inDir, "a history written into the working directory")
	files, err := filepath.Glob(filepath.Join(tmp, "verify-*.jsonl"))
	require.NoError(t, err)
	require.Len(t, files, 1, "no history in the temp dir")
	hist := files[0]
	require.Contains(t, stderr.String(), "verify: history to "+hist+"\n", "where the history goes, said at the start")
	require.Contains(t, stderr.String(), "interrupted: world "+strings.TrimSuffix(filepath.Base(hist), ".jsonl")+" removed; history so far in "+hist)
	require.ElementsMatch(t, names, streamNames(t, env.Client), "the scratch world is left behind")
	b, err := os.ReadFile(files[0])
	require.NoError(t, err)
	require.Contains(t, string(b), `"t":"send"`)
	testutil.WaitFor(t, 10*time.Second, "the owner processes end with verify", func() bool { return len(ownerProcs(t)) == 0 })
}

// ownerProcs are the pids of running owner processes of this test's
// binary (Linux: /proc; elsewhere none are found).
func ownerProcs(t *testing.T) []string {
	t.Helper()
	dirs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var out []string
	for _, p := range dirs {
		b, err := os.ReadFile(p)
		if err == nil && strings.HasPrefix(string(b), bin+"\x00__verify-owner") {
			out = append(out, p)
		}
	}
	return out
}

// TestVerify_MutualTLS_ThroughTheProxy: against a server that requires
// TLS with client certificates, verify runs with the global TLS flags and
// the cut fault: its owners, producers and ownership clients reach the
// server through its local TCP proxy and do the TLS handshake with the
// server through it, and the run passes.
func TestVerify_MutualTLS_ThroughTheProxy(t *testing.T) {
	dir := t.TempDir()
	p := testutil.WritePKI(t, dir)
	s, err := server.Start(server.Config{StoreDir: t.TempDir(), Port: -1, ConfigFile: p.MTLSConf(t, dir)})
	require.NoError(t, err)
	t.Cleanup(s.Stop)
	url := fmt.Sprintf("tls://127.0.0.1:%d", s.Addr().(*net.TCPAddr).Port)
	r := cli(t, url, "", "verify", "--duration", "5s", "--ttl", "1s", "--ids", "2", "--faults", "cut", "--json",
		"--history", filepath.Join(dir, "h.jsonl"), "--tlscert", p.ClientCert, "--tlskey", p.ClientKey, "--tlsca", p.CA, "--timeout", "10s")
	require.Equal(t, 0, r.code, "%+v", r)
	var out struct {
		Outcome    string
		Partitions int
		Faults     map[string]int
	}
	require.NoError(t, json.Unmarshal([]byte(r.out), &out), r.out)
	require.Equal(t, "passed", out.Outcome)
	require.Equal(t, world.DefaultPartitions, out.Partitions, "a single server's scratch world is partitioned, as world add makes it")
	require.Positive(t, out.Faults["cut"])

	// Without a client certificate the server refuses: an error, exit 1.
	r = cli(t, url, "", "verify", "--duration", "5s", "--tlsca", p.CA, "--timeout", "2s", "--history", filepath.Join(dir, "h2.jsonl"))
	require.Equal(t, 1, r.code, "%+v", r)
}
