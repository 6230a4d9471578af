//go:build bench

// The benchmark harness links an embedded nats-server, so it is built into
// the CLI only with the build tag bench (the binary fencepost-bench, see
// the Makefile); a fencepost built without it runs that binary for
// `fencepost bench` (cmd_bench_exec.go).

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/fencepost/fencepost/bench"
	"github.com/fencepost/fencepost/client"
)

func init() {
	// fencepost bench starts this executable as its owner processes
	// (takeover and handoff scenarios); not a command.
	ownerProcess = func() {
		if bench.IsOwnerProcess() {
			os.Exit(bench.OwnerMain())
		}
	}
}

// The flags of the bench command.
var benchFlags struct {
	Scenario    string        `name:"scenario" placeholder:"S" complete:"steady,takeover,handoff,fan-in,zipf,counter,call" default:"${bench_scenario}" help:"scenario: steady, takeover (owner processes killed, stopped past their ttl, force-seized), handoff (graceful stops), fan-in (10,000 ids, a pool of workers), zipf (100,000 ids, posts drawn from a Zipf distribution, owner processes killed every 5 s), counter (takeover's faults, each message counted in its id's per-id state; every counter checked) or call (calls answered by a worker against NATS request-reply to one subscriber: calls/s, latency)"`
	Size        string        `name:"size" placeholder:"SIZE" complete:"smoke,full" default:"${bench_size}" help:"size: smoke (about 30 s) or full (a few minutes)"`
	Embedded    bool          `name:"embedded" default:"true" help:"run an embedded server with its store in a temporary directory; the default unless --server is given"`
	IDs         int           `name:"ids" placeholder:"N" help:"mailboxes (default: the size's)"`
	Duration    time.Duration `name:"duration" placeholder:"D" help:"posting time of each side (default: the size's; not fan-in)"`
	Rounds      int           `name:"rounds" placeholder:"N" help:"alternations of the two sides (default: the size's; fan-in: messages per id)"`
	Auth        bool          `name:"auth" help:"takeover, handoff, zipf: run the embedded server as fencepostd --auth does, the producers with the producer role's credentials and each owner process with credentials of its own, bound to its node (not with --server)"`
	Cluster     int           `name:"cluster" placeholder:"N" help:"run an embedded cluster of N members (3 to 5) in this process instead of one server; the world and the raw stream are then R3 (see --replicas)"`
	Replicas    int           `name:"replicas" placeholder:"N" help:"replicas of the world's streams and of the raw stream (default: 3 with --cluster, else 1)"`
	KillLeaders bool          `name:"kill-leaders" help:"with --cluster: in each round kill the leader of the mailbox stream, then of the bucket stream (raw: its stream's leader twice), each member started again before the next kill; the stall of each kill is reported"`
	Owners      int           `name:"owners" placeholder:"N" help:"takeover, handoff, zipf, counter: owner processes (default: the size's)"`
	OwnerProcs  int           `name:"owner-gomaxprocs" placeholder:"N" help:"takeover, handoff, zipf, counter: GOMAXPROCS of each owner process (default: Go's own, the machine's cores; the owners share the machine with the server and the producers)"`
	Faults      string        `name:"faults" placeholder:"LIST" complete:"kill,stop,seize,term,none" help:"takeover, handoff, zipf, counter: the faults injected in turn, comma-separated: kill, stop, seize, term; or none (default: the scenario's)"`
	Shards      int           `name:"shards" placeholder:"N" help:"create fencepost's world sharded, with N shards (1 to 1024; fencepost world add --shards): its workers hold shards, not ids"`
	Partitions  int           `name:"partitions" placeholder:"N" help:"create fencepost's world with N partitions: each worker reads the posts of the partitions it serves, not every post (fencepost world add --partitions; 0: none; default as world add's: 64 with one replica, none with more)"`
	Peer        string        `name:"peer" placeholder:"P" complete:"pcgroups,none" help:"a third side, alternated with fencepost and raw JetStream: pcgroups (orbit.go's partitioned consumer groups, a static group with max ack pending 1 for strict per-key order, its members in processes hit by the same faults as fencepost's owners) or none (default: pcgroups, except with counter, --auth and --kill-leaders)"`
	PeerMembers int           `name:"pcgroups-members" placeholder:"N" help:"members (and partitions) of the pcgroups side's static group (default: --owners with owner processes, the pool's workers in fan-in, the ids in steady)"`
	Quiet       bool          `name:"quiet" help:"no progress on stderr"`
	Chart       string        `name:"chart" placeholder:"FILE" help:"write an SVG chart of throughput and latency p99 per second, takeovers marked, to this file"`
}

func init() {
	cliVars["bench_scenario"] = bench.ScenarioSteady
	cliVars["bench_size"] = bench.SizeSmoke
	register("bench", &command{
		usage: "bench [--scenario steady|takeover|handoff|fan-in|zipf|counter] [--size smoke|full] [--owners N] [--faults LIST] [--auth] [--chart FILE]",
		short: "benchmark delivery beside raw JetStream on the same server; exit 1 if a message was lost or committed under a stale epoch",
		examples: []string{
			"fencepost bench --scenario takeover --size smoke   # a table: fencepost beside raw JetStream, lost and stale-epoch commits (both must be 0)",
			"fencepost bench --scenario takeover --owners 1 --faults none   # what each owner process costs: compare with --owners 3",
			"fencepost bench --server nats://10.0.0.1:4222 --scenario steady --json",
		},
		flags: &benchFlags,
		run:   runBench,
	})
}

// ownerScenarios are the scenarios with owner processes (--owners,
// --faults).
var ownerScenarios = []string{bench.ScenarioTakeover, bench.ScenarioHandoff, bench.ScenarioZipf, bench.ScenarioCounter}

// benchFaults parses --faults: nil for the scenario's own, else the kinds
// in turn; msg says what is wrong with it.
func benchFaults(list string) (faults []string, msg string) {
	if list == "" {
		return nil, ""
	}
	for k := range strings.SplitSeq(list, ",") {
		k = strings.TrimSpace(k)
		switch k {
		case bench.FaultKill, bench.FaultStop, bench.FaultSeize, bench.FaultTerm, bench.FaultNone:
		default:
			return nil, fmt.Sprintf("unknown fault %q: use kill, stop, seize, term (comma-separated) or none", k)
		}
		faults = append(faults, k)
	}
	if slices.Contains(faults, bench.FaultNone) && len(faults) > 1 {
		return nil, "none goes alone"
	}
	return faults, ""
}

// benchProfileEnv, set to a file name, makes the bench write a CPU
// profile of its own process there: the embedded server (or cluster) and
// the producers of every side. The owner processes profile themselves
// (bench.OwnerProfileEnv).
const benchProfileEnv = "FENCEPOST_BENCH_CPUPROFILE"

func runBench(e *env, args []string) int {
	if len(args) != 0 {
		return e.usageErr("bench", "takes no arguments, got %d", len(args))
	}
	if name := os.Getenv(benchProfileEnv); name != "" {
		f, err := os.Create(name)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			return e.fail(fmt.Errorf("bench: %s: %w", benchProfileEnv, err))
		}
		defer func() { pprof.StopCPUProfile(); _ = f.Close() }()
	}
	sizes, ok := bench.ScenarioSizes[benchFlags.Scenario]
	if !ok {
		return e.usageErr("bench", "--scenario %q: use %s", benchFlags.Scenario, strings.Join(bench.Scenarios, ", "))
	}
	if _, ok := sizes[benchFlags.Size]; !ok {
		return e.usageErr("bench", "--size %q: use smoke or full", benchFlags.Size)
	}
	serverGiven, embeddedGiven := e.given["server"], e.given["embedded"]
	embedded := benchFlags.Embedded
	if serverGiven && !embeddedGiven {
		embedded = false
	}
	if serverGiven && embeddedGiven && embedded {
		return e.usageErr("bench", "give --server or --embedded, not both")
	}
	if benchFlags.Auth && !embedded {
		return e.usageErr("bench", "--auth runs a fencepostd --auth of its own: not with --server")
	}
	if benchFlags.Cluster != 0 && (serverGiven || benchFlags.Auth) {
		return e.usageErr("bench", "--cluster runs an embedded cluster of its own: not with --server or --auth")
	}
	if benchFlags.KillLeaders && benchFlags.Cluster == 0 {
		return e.usageErr("bench", "--kill-leaders kills members of the embedded cluster: give --cluster 3")
	}
	if benchFlags.Auth && benchFlags.Scenario != bench.ScenarioTakeover && benchFlags.Scenario != bench.ScenarioHandoff && benchFlags.Scenario != bench.ScenarioZipf {
		return e.usageErr("bench", "--auth gives owner processes credentials of their own: use takeover, handoff or zipf")
	}

	faults, msg := benchFaults(benchFlags.Faults)
	if msg != "" {
		return e.usageErr("bench", "--faults %q: %s", benchFlags.Faults, msg)
	}
	if benchFlags.Owners < 0 {
		return e.usageErr("bench", "--owners %d: give 1 or more", benchFlags.Owners)
	}
	if benchFlags.OwnerProcs < 0 {
		return e.usageErr("bench", "--owner-gomaxprocs %d: give 1 or more", benchFlags.OwnerProcs)
	}
	if (benchFlags.Owners > 0 || faults != nil || benchFlags.OwnerProcs > 0) && !slices.Contains(ownerScenarios, benchFlags.Scenario) {
		return e.usageErr("bench", "--owners, --owner-gomaxprocs and --faults are of owner processes: use %s", strings.Join(ownerScenarios, ", "))
	}

	partitions := benchFlags.Partitions
	if !e.given["partitions"] {
		partitions = bench.PartitionsDefault
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg := bench.Config{Scenario: benchFlags.Scenario, Size: benchFlags.Size, IDs: benchFlags.IDs, Duration: benchFlags.Duration, Rounds: benchFlags.Rounds, Log: e.log, Auth: benchFlags.Auth,
		Cluster: benchFlags.Cluster, Replicas: benchFlags.Replicas, KillLeaders: benchFlags.KillLeaders, Owners: benchFlags.Owners, OwnerGOMAXPROCS: benchFlags.OwnerProcs, Faults: faults, Partitions: partitions, Shards: benchFlags.Shards}
	cfg.Peer, cfg.PcgroupsMembers = benchFlags.Peer, benchFlags.PeerMembers
	if msg := benchPeer(cfg); msg != "" {
		return e.usageErr("bench", "%s", msg)
	}
	where := "an embedded server"
	if cfg.Cluster != 0 {
		where = fmt.Sprintf("an embedded %d-member cluster", cfg.Cluster)
	}
	if cfg.Auth {
		where = "an embedded fencepostd --auth (per-node owner credentials)"
	}
	if !embedded {
		// The user's server, with the connection flags (creds, TLS) of every
		// command, and a longer JetStream timeout than a single operation's.
		// Owner processes connect to the URL alone.
		e.clientOpts = append(e.clientOpts, client.WithTimeout(max(e.timeout, 30*time.Second)))
		c, err := e.client()
		if err != nil {
			return e.fail(err)
		}
		cfg.Client = c
		where = e.server
	}
	var pr *benchProgress
	if !benchFlags.Quiet {
		fmt.Fprintf(e.err, "bench %s (%s) on %s\n", cfg.Scenario, cfg.Size, where)
		f, isFile := e.err.(*os.File)
		pr = &benchProgress{out: e.err, tty: isFile && isTerminal(f)}
		cfg.Progress = pr.show
	}
	rep, err := bench.Run(ctx, cfg)
	if pr != nil {
		pr.end()
	}
	if err != nil {
		return e.fail(err)
	}
	if benchFlags.Chart != "" {
		if err := writeChart(benchFlags.Chart, rep); err != nil {
			return e.fail(err)
		}
		if !benchFlags.Quiet {
			fmt.Fprintf(e.err, "chart written to %s\n", benchFlags.Chart)
		}
	}
	if e.json {
		b, err := json.Marshal(struct {
			Outcome string `json:"outcome"`
			bench.Report
		}{"bench", rep})
		if err != nil {
			return e.fail(err)
		}
		fmt.Fprintln(e.out, string(b))
	} else {
		printBenchTable(e, rep)
	}
	if rep.OrderViolations > 0 {
		fmt.Fprintf(e.err, "fencepost bench: %d of fencepost's messages delivered out of order (per id): %v\n", rep.OrderViolations, rep.OrderExamples)
	}
	if p := rep.Pcgroups; p != nil && !p.OK() {
		fmt.Fprintf(e.err, "fencepost bench: the pcgroups side: %d lost %v, %d out of order %v\n", p.Lost, p.LostExamples, p.OrderViolations, p.OrderExamples)
	}
	if !rep.OK() {
		fmt.Fprintf(e.err, "fencepost bench: FAILED: %d lost, %d stale-epoch commits (both must be 0)\n", rep.Lost, rep.StaleCommits)
		for _, ex := range rep.StaleExamples {
			fmt.Fprintf(e.err, "  stale commit: %s\n", ex)
		}
		for _, ex := range rep.CounterExamples {
			fmt.Fprintf(e.err, "  counter off: %s\n", ex)
		}
		return exitError
	}
	return exitOK
}

// cellPadder gives every line of a table the same number of cells before
// its tabwriter aligns it: the tabwriter aligns a column over consecutive
// lines that have it, and a row with fewer cells would break the pcgroups
// side's columns in two.
type cellPadder struct {
	buf   strings.Builder
	tw    *tabwriter.Writer
	cells int // tab-terminated cells per line
}

func (c *cellPadder) Write(b []byte) (int, error) { return c.buf.Write(b) }

// Flush pads each line and writes the table.
func (c *cellPadder) Flush() error {
	for line := range strings.SplitAfterSeq(c.buf.String(), "\n") {
		if n := strings.Count(line, "\t"); n < c.cells && strings.HasSuffix(line, "\n") {
			line = strings.TrimSuffix(line, "\n") + strings.Repeat("\t", c.cells-n) + "\n"
		}
		if _, err := io.WriteString(c.tw, line); err != nil {
			return err
		}
	}
	c.buf.Reset()
	return c.tw.Flush()
}

// benchPeer says what is wrong with --peer and --pcgroups-members ("" if
// nothing).
func benchPeer(cfg bench.Config) string {
	switch cfg.Peer {
	case "", bench.PeerNone:
	case bench.PeerPcgroups:
		if why := cfg.PeerSupported(); why != "" {
			return fmt.Sprintf("--peer pcgroups: %s (use --peer none)", why)
		}
	default:
		return fmt.Sprintf("--peer %q: use pcgroups or none", cfg.Peer)
	}
	if cfg.PcgroupsMembers < 0 || cfg.PcgroupsMembers > bench.MaxPcgroupsMembers {
		return fmt.Sprintf("--pcgroups-members %d: give 1 to %d", cfg.PcgroupsMembers, bench.MaxPcgroupsMembers)
	}
	if cfg.PcgroupsMembers > 0 && cfg.Peer == bench.PeerNone {
		return "--pcgroups-members is of the pcgroups side: not with --peer none"
	}
	return ""
}

func writeChart(path string, rep bench.Report) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("bench: --chart: %w", err)
	}
	if err := bench.WriteSVG(f, rep); err != nil {
		f.Close()
		return fmt.Errorf("bench: --chart: %w", err)
	}
	return f.Close()
}

func isTerminal(f *os.File) bool {
	if f == nil {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// benchProgress shows the run's progress on stderr: a bar redrawn in place
// on a terminal, otherwise a plain line when a side's round starts and
// every 5 s.
type benchProgress struct {
	out       io.Writer
	tty       bool
	last      time.Time
	lastRound string
	drawn     bool
}

func (p *benchProgress) show(s bench.Progress) {
	phase := "posting"
	if !s.Posting {
		phase = "settling"
	}
	timing := fmt.Sprintf("%4.1fs", s.Elapsed.Seconds())
	if s.Duration > 0 {
		timing = fmt.Sprintf("%4.1f/%.1fs", s.Elapsed.Seconds(), s.Duration.Seconds())
	}
	line := fmt.Sprintf("round %d/%d  %-9s %-8s %s  sent %-9d delivered %-9d", s.Round, s.Rounds, s.Side, phase, timing, s.Sent, s.Delivered)
	if s.Takeovers > 0 {
		line += fmt.Sprintf(" takeovers %d", s.Takeovers)
	}
	if p.tty {
		const width = 24
		fill := int(s.Done*width + 0.5)
		fill = min(max(fill, 0), width)
		fmt.Fprintf(p.out, "\r\033[K[%s%s] %3.0f%% %s", strings.Repeat("#", fill), strings.Repeat("-", width-fill), 100*s.Done, line)
		p.drawn = true
		return
	}
	round := fmt.Sprintf("%d %s", s.Round, s.Side)
	if round == p.lastRound && time.Since(p.last) < 5*time.Second {
		return
	}
	p.lastRound, p.last = round, time.Now()
	fmt.Fprintf(p.out, "%3.0f%% %s\n", 100*s.Done, line)
}

func (p *benchProgress) end() {
	if p.drawn {
		fmt.Fprintln(p.out)
	}
}

func printBenchTable(e *env, r bench.Report) {
	if r.Calls != nil {
		printCallTable(e, r) // cmd_bench_call.go
		return
	}
	what := fmt.Sprintf("%.0f s of posting per side", r.Seconds)
	if r.Scenario == bench.ScenarioFanIn {
		what = fmt.Sprintf("%d message(s) per id per side", r.Rounds)
	}
	fmt.Fprintf(e.out, "scenario %s, size %s: %d ids, %s in %d alternating rounds", r.Scenario, r.Size, r.IDs, what, r.Rounds)
	if r.Owners > 0 {
		fmt.Fprintf(e.out, ", %d owner processes, ttl %d ms", r.Owners, r.TTLms)
		if r.OwnerGOMAXPROCS > 0 {
			fmt.Fprintf(e.out, ", GOMAXPROCS %d each", r.OwnerGOMAXPROCS)
		}
	}
	if r.Auth {
		fmt.Fprint(e.out, ", fencepostd --auth (each owner process its own node credentials)")
	}
	if r.Cluster > 0 {
		fmt.Fprintf(e.out, ", an embedded %d-member cluster", r.Cluster)
	}
	if r.Replicas > 1 {
		fmt.Fprintf(e.out, ", R%d streams", r.Replicas)
	}
	fmt.Fprint(e.out, "\n")
	p := r.Pcgroups
	if p != nil {
		fmt.Fprintf(e.out, "pcgroups: a static group of %d members over %d partitions, max ack pending %d, ack wait (and pinned TTL) %d ms", p.Members, p.Partitions, p.MaxAckPending, p.AckWaitMs)
		if p.Processes > 0 {
			fmt.Fprintf(e.out, ", in %d member processes (each an instance of every member)", p.Processes)
		}
		fmt.Fprintln(e.out)
	}
	fmt.Fprintln(e.out)
	tw := &cellPadder{tw: tabwriter.NewWriter(e.out, 0, 0, 2, ' ', tabwriter.AlignRight), cells: 4}
	if p != nil {
		tw.cells = 6 // the pcgroups side's two
	}
	ratio := func(a, b float64) string {
		if b == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2fx", a/b)
	}
	// pc is the two cells of the pcgroups side (its figure, ours against
	// it), or none when it did not run.
	var pr bench.PeerReport
	if p != nil {
		pr = *p
	}
	pc := func(v, vs string) string {
		if p == nil {
			return ""
		}
		return v + "\t" + vs + "\t"
	}
	fmt.Fprintln(tw, "\tfencepost\traw JetStream\tours/raw\t"+pc("pcgroups", "ours/pcgroups"))
	fmt.Fprintf(tw, "sent msgs/s\t%.0f\t%.0f\t%s\t%s\n", r.SendThroughput, r.RawSendThroughput, ratio(r.SendThroughput, r.RawSendThroughput), pc(fmt.Sprintf("%.0f", pr.SendThroughput), ratio(r.SendThroughput, pr.SendThroughput)))
	fmt.Fprintf(tw, "delivered msgs/s\t%.0f\t%.0f\t%.2fx\t%s\n", r.Throughput, r.RawThroughput, r.Ratio, pc(fmt.Sprintf("%.0f (%.2fx raw)", pr.Throughput, pr.Ratio), ratio(r.Throughput, pr.Throughput)))
	fmt.Fprintf(tw, "latency p50 ms\t%.2f\t%.2f\t\t%s\n", r.LatencyP50, r.RawLatencyP50, pc(fmt.Sprintf("%.2f", pr.LatencyP50), ""))
	fmt.Fprintf(tw, "latency p99 ms\t%.2f\t%.2f\t\t%s\n", r.LatencyP99, r.RawLatencyP99, pc(fmt.Sprintf("%.2f", pr.LatencyP99), ""))
	fmt.Fprintf(tw, "latency p999 ms\t%.2f\t%.2f\t\t%s\n", r.LatencyP999, r.RawLatencyP999, pc(fmt.Sprintf("%.2f", pr.LatencyP999), ""))
	if r.RequestsPerMsg > 0 {
		fmt.Fprintf(tw, "requests to the server per delivery (the post included)\t%.2f\t%.2f\t%s\t%s\n", r.RequestsPerMsg, r.RawRequestsPerMsg, ratio(r.RequestsPerMsg, r.RawRequestsPerMsg), pc(fmt.Sprintf("%.2f", pr.RequestsPerMsg), ratio(r.RequestsPerMsg, pr.RequestsPerMsg)))
	}
	if r.CPUPerMsgUs > 0 {
		fmt.Fprintf(tw, "machine CPU per delivery us (every process)\t%.1f\t%.1f\t%s\t%s\n", r.CPUPerMsgUs, r.RawCPUPerMsgUs, ratio(r.CPUPerMsgUs, r.RawCPUPerMsgUs), pc(fmt.Sprintf("%.1f", pr.CPUPerMsgUs), ratio(r.CPUPerMsgUs, pr.CPUPerMsgUs)))
	}
	if r.OwnersCPUPerMsgUs > 0 {
		fmt.Fprintf(tw, "  of which the owner (member) processes us\t%.1f\t\t\t%s\n", r.OwnersCPUPerMsgUs, pc(fmt.Sprintf("%.1f", pr.MembersCPUPerMsgUs), ""))
	}
	fmt.Fprintf(tw, "messages sent\t%d\t%d\t\t%s\n", r.Sent, r.RawSent, pc(fmt.Sprint(pr.Sent), ""))
	fmt.Fprintf(tw, "duplicates %%\t%.4f\t\t\t%s\n", r.DuplicatesPct, pc(fmt.Sprintf("%.4f", pr.DuplicatesPct), ""))
	fmt.Fprintf(tw, "lost\t%d\t%d\t\t%s\n", r.Lost, r.RawLost, pc(fmt.Sprint(pr.Lost), ""))
	if p != nil {
		fmt.Fprintf(tw, "still waiting when the run ended\t\t\t\t%d\t\t\n", pr.Undelivered)
	}
	fmt.Fprintf(tw, "out of order (per id)\t%d of %d\t%d of %d\t\t%s\n", r.OrderViolations, r.OrderChecked, r.RawOrderViolations, r.RawOrderChecked, pc(fmt.Sprintf("%d of %d", pr.OrderViolations, pr.OrderChecked), ""))
	fmt.Fprintf(tw, "committed, still stored after the last round (oldest ms; ms of posts)\t%d (%.0f; %.0f)\t\t\t%s\n", r.CommittedStored, r.CommittedStoredAgeMs, r.CommittedStoredPostMs, pc("", ""))
	fmt.Fprintf(tw, "delivered by the final drain\t%d\t\t\t%s\n", r.FinalDrained, pc(fmt.Sprint(pr.FinalDrained), ""))
	fmt.Fprintf(tw, "stale-epoch commits\t%d of %d\t\t\t\n", r.StaleCommits, r.CommitsChecked)
	if r.CountersChecked > 0 {
		fmt.Fprintf(tw, "counters off (per-id state, exactly once)\t%d of %d (%d counted)\t\t\t\n", r.CountersOff, r.CountersChecked, r.CounterMessages)
	}
	fmt.Fprintf(tw, "bucket writes (ownership, locks, commits) per delivery\t%.3f\t\t\t\n", r.BucketWritesPerMsg)
	if r.LedgerMissed > 0 {
		fmt.Fprintf(tw, "bucket writes the checker missed\t%d\t\t\t\n", r.LedgerMissed)
	}
	fmt.Fprintf(tw, "stale-epoch deliveries (refused at commit)\t%d of %d\t\t\t\n", r.StaleDeliveries, r.StaleChecked)
	fmt.Fprintf(tw, "takeovers\t%d\t\t\t%s\n", r.Takeovers, pc(fmt.Sprint(pr.Takeovers), ""))
	fmt.Fprintf(tw, "takeover gap p50 / p99 / max ms\t%.1f / %.1f / %.1f\t\t\t%s\n", r.TakeoverGapP50, r.TakeoverGapP99, r.TakeoverGapMax,
		pc(fmt.Sprintf("%.1f / %.1f / %.1f", pr.TakeoverGapP50, pr.TakeoverGapP99, pr.TakeoverGapMax), ratio(r.TakeoverGapP99, pr.TakeoverGapP99)))
	kinds := make([]string, 0, len(r.TakeoverGaps))
	for k := range r.TakeoverGaps {
		kinds = append(kinds, k)
	}
	for k := range pr.TakeoverGaps {
		if _, ok := r.TakeoverGaps[k]; !ok {
			kinds = append(kinds, k)
		}
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		g, pg := r.TakeoverGaps[k], pr.TakeoverGaps[k]
		fmt.Fprintf(tw, "  %s: %d faults, %d ids, gap p50 / p99 / max ms\t%.1f / %.1f / %.1f\t\t\t%s\n", k, g.Faults, g.Samples, g.P50, g.P99, g.Max,
			pc(fmt.Sprintf("%d faults, %d ids: %.1f / %.1f / %.1f", pg.Faults, pg.Samples, pg.P50, pg.P99, pg.Max), ratio(g.P99, pg.P99)))
		if g.PendingSamples > 0 || pg.PendingSamples > 0 {
			fmt.Fprintf(tw, "  %s: ids with mail waiting at the fault, gap p99 ms\t%.1f\t\t\t%s\n", k, g.PendingP99, pc(fmt.Sprintf("%.1f", pg.PendingP99), ratio(g.PendingP99, pg.PendingP99)))
		}
		fmt.Fprintf(tw, "  %s: until the new claim was stored, p50 / p99 ms\t%.1f / %.1f\t\t\t\n", k, g.ClaimP50, g.ClaimP99)
	}
	if r.SelfFences > 0 {
		fmt.Fprintf(tw, "in-process workers that self-fenced (restarted)\t%d\t\t\t\n", r.SelfFences)
	}
	if r.UnplannedExits > 0 {
		fmt.Fprintf(tw, "owner processes that exited unplanned\t%d\t\t\t\n", r.UnplannedExits)
	}
	for _, k := range r.LeaderKills {
		ours, raw := fmt.Sprintf("%.0f", k.StallMs), ""
		if k.Side != "fencepost" {
			ours, raw = "", ours
		}
		fmt.Fprintf(tw, "stall ms, the %s stream's leader (%s) killed at %.1f s\t%s\t%s\t\t\n", k.Stream, k.Node, k.AtS, ours, raw)
	}
	tw.Flush()
}
