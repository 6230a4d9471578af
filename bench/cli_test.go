package bench_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// TestCLI runs `fencepost bench` as a user would: a short steady run on the
// default embedded server prints one JSON object with the contract's
// fields and exits 0; an unknown scenario is a usage error (exit 2); a
// short takeover run writes its chart.
func TestCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := filepath.Join(t.TempDir(), "fencepost")
	if out, err := exec.Command("go", "build", "-tags", "bench", "-o", bin, "../cmd/fencepost").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	run := func(args ...string) (string, string, int) {
		cmd := exec.Command(bin, args...)
		var so, se bytes.Buffer
		cmd.Stdout, cmd.Stderr = &so, &se
		err := cmd.Run()
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee):
			return so.String(), se.String(), ee.ExitCode()
		case err != nil:
			t.Fatal(err)
		}
		return so.String(), se.String(), 0
	}

	out, errOut, code := run("bench", "--scenario", "steady", "--size", "smoke", "--duration", "1s", "--ids", "2", "--json")
	if code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if !strings.Contains(errOut, "round 1/4") {
		t.Errorf("no progress line on stderr: %q", errOut)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("not one JSON object: %v\n%s", err, out)
	}
	for _, k := range []string{"outcome", "scenario", "throughput", "raw_throughput", "ratio", "latency_p50_ms", "latency_p99_ms", "latency_p999_ms", "takeover_gap_p99_ms", "duplicates_pct", "lost", "stale_commits"} {
		if _, ok := m[k]; !ok {
			t.Errorf("no %q in %s", k, out)
		}
	}
	if m["lost"] != 0.0 || m["stale_commits"] != 0.0 || m["takeover_gap_p99_ms"] != 0.0 || m["ratio"].(float64) <= 0 {
		t.Errorf("lost %v stale %v gap %v ratio %v", m["lost"], m["stale_commits"], m["takeover_gap_p99_ms"], m["ratio"])
	}
	// The pcgroups side runs by default, beside the others: its figures
	// and ours against it.
	peer, _ := m["pcgroups"].(map[string]any)
	if peer == nil || peer["lost"] != 0.0 || peer["order_violations"] != 0.0 || peer["throughput"].(float64) <= 0 || m["ratio_pcgroups"].(float64) <= 0 || m["order_violations"] != 0.0 {
		t.Errorf("pcgroups %v, ratio_pcgroups %v, order_violations %v", peer, m["ratio_pcgroups"], m["order_violations"])
	}

	// --owners and --faults: usage errors name what is wrong, and run
	// nothing.
	for _, c := range []struct{ args, want string }{
		{"--scenario steady --owners 2", "--owners, --owner-gomaxprocs and --faults are of owner processes"},
		{"--scenario fan-in --faults none", "--owners, --owner-gomaxprocs and --faults are of owner processes"},
		{"--scenario steady --owner-gomaxprocs 1", "--owners, --owner-gomaxprocs and --faults are of owner processes"},
		{"--scenario takeover --owner-gomaxprocs -1", "--owner-gomaxprocs -1: give 1 or more"},
		{"--scenario takeover --faults kill,none", "none goes alone"},
		{"--scenario takeover --faults kill,boom", `unknown fault "boom"`},
		{"--scenario takeover --owners -1", "give 1 or more"},
		{"--scenario steady --peer nope", `--peer "nope": use pcgroups or none`},
		{"--scenario counter --peer pcgroups", "--peer pcgroups: the counter scenario"},
		{"--scenario fan-in --peer none --pcgroups-members 2", "not with --peer none"},
		{"--scenario fan-in --pcgroups-members -1", "--pcgroups-members -1: give 1 to 256"},
	} {
		out, errOut, code := run(append([]string{"bench", "--quiet"}, strings.Fields(c.args)...)...)
		if code != 2 || !strings.Contains(errOut, c.want) || out != "" {
			t.Errorf("bench %s: exit %d, stdout %q, stderr %q; want exit 2 and %q", c.args, code, out, errOut, c.want)
		}
	}

	if _, _, code := run("bench", "--scenario", "nope"); code != 2 {
		t.Errorf("--scenario nope: exit %d, want 2", code)
	}

	// A takeover run through the real binary, which starts itself as the
	// owner processes: the takeover fields and a chart. The owners run
	// with the GOMAXPROCS asked for, which they report themselves: one
	// the machine's cores would not give.
	procs := 1
	if runtime.NumCPU() == 1 {
		procs = 2
	}
	chart := filepath.Join(t.TempDir(), "takeover.svg")
	out, errOut, code = run("bench", "--scenario", "takeover", "--duration", "3s", "--rounds", "1", "--ids", "3", "--owner-gomaxprocs", strconv.Itoa(procs), "--json", "--chart", chart)
	if code != 0 {
		t.Fatalf("takeover: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	m = map[string]any{}
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("not one JSON object: %v\n%s", err, out)
	}
	for _, k := range []string{"takeovers", "takeover_gap_p50_ms", "takeover_gap_p99_ms", "takeover_gap_max_ms", "send_throughput", "stale_deliveries", "commits_checked", "takeover_gaps", "faults"} {
		if _, ok := m[k]; !ok {
			t.Errorf("no %q in %s", k, out)
		}
	}
	if m["owner_gomaxprocs"] != float64(procs) {
		t.Errorf("owner_gomaxprocs %v, want %d: the owners did not run with --owner-gomaxprocs", m["owner_gomaxprocs"], procs)
	}
	if m["scenario"] != "takeover" || m["lost"] != 0.0 || m["stale_commits"] != 0.0 || m["takeovers"].(float64) < 1 || m["takeover_gap_p99_ms"].(float64) <= 0 {
		t.Errorf("scenario %v lost %v stale %v takeovers %v gap %v", m["scenario"], m["lost"], m["stale_commits"], m["takeovers"], m["takeover_gap_p99_ms"])
	}
	// The pcgroups side's member processes are this binary too.
	if peer, _ := m["pcgroups"].(map[string]any); peer == nil || peer["lost"] != 0.0 || peer["order_violations"] != 0.0 || peer["processes"] != 3.0 || peer["takeovers"].(float64) < 1 {
		t.Errorf("pcgroups %v", peer)
	}
	svg, err := os.ReadFile(chart)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(svg), "<svg") || !strings.Contains(string(svg), "stroke-dasharray") {
		t.Errorf("chart without takeover markers: %.300s", svg)
	}
}
