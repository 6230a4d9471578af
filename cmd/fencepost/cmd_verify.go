package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/verify"
)

// The flags of the verify command.
var verifyFlags struct {
	Duration time.Duration `name:"duration" placeholder:"D" default:"60s" help:"how long producers post and faults are injected (5s to 24h)"`
	IDs      int           `name:"ids" placeholder:"N" default:"8" help:"mailboxes of the scratch world (1 to 1000)"`
	Faults   string        `name:"faults" placeholder:"LIST" complete:"kill,stop,seize,cut,all,none" default:"kill,stop,seize,cut" help:"faults to inject: kill, stop, seize, cut (comma-separated), all or none"`
	History  string        `name:"history" placeholder:"FILE" help:"write the history here, JSON lines (default: WORLD.jsonl in the OS temp dir, $TMPDIR or /tmp; the verdict names it)"`
	Replicas int           `name:"replicas" placeholder:"N" help:"replicas of the scratch world: 1, 3 or 5 (default: 3 if the deployment takes it, else 1)"`
	Shards   int           `name:"shards" placeholder:"N" help:"make the scratch world sharded, with N shards (1 to 1024; world add --shards): its owners serve shards, checked per shard (default: a per-id world)"`
	Owners   int           `name:"owners" placeholder:"N" default:"3" help:"owner processes (2 to 16)"`
	TTL      time.Duration `name:"ttl" placeholder:"D" default:"2s" help:"the owners' lease (500ms to 1m)"`
	Check    string        `name:"check" placeholder:"FILE" help:"check a history file written by an earlier run instead (no server needed)"`
	Quiet    bool          `name:"quiet" help:"no progress on stderr"`
}

// verifyOwnerCommand is the hidden command the verify command starts its
// owner processes with: this executable, so no second binary is needed.
const verifyOwnerCommand = "__verify-owner"

func init() {
	register("verify", &command{
		usage: "verify [--duration 60s] [--ids N] [--faults kill,stop,seize,cut] [--shards N] [--history FILE] [--check FILE]",
		short: "history-checked run on a scratch world of the deployment, under faults; one verdict per invariant; exit 1 on a violation",
		examples: []string{
			"fencepost verify --server nats://10.0.0.1:4222 --duration 60s   # scratch world, own owners, kill/stop/seize/cut; exit 0: every invariant held",
			"fencepost verify --duration 5m --faults kill,stop --json         # one JSON object: outcome, invariants, figures",
			"fencepost verify --shards 16                                     # the same on a sharded scratch world",
			"fencepost verify --check /tmp/verify-1a2b3c4d.jsonl              # check a history file again (no server)",
		},
		flags: &verifyFlags,
		run:   runVerify,
	})
	register(verifyOwnerCommand, &command{
		usage:  verifyOwnerCommand,
		short:  "an owner process of fencepost verify (its spec on stdin)",
		hidden: true,
		run:    func(*env, []string) int { return verify.OwnerMain(os.Stdin, os.Stdout) },
	})
}

func runVerify(e *env, args []string) int {
	fl := verifyFlags
	switch {
	case len(args) != 0:
		return e.usageErr("verify", "takes no arguments, got %d", len(args))
	case fl.Check != "":
		return verifyFile(e, fl.Check)
	case e.given["world"]:
		return e.usageErr("verify", "verify runs on a scratch world of its own; drop --world")
	case fl.IDs < 1 || fl.IDs > verify.MaxIDs:
		return e.usageErr("verify", "--ids %d: give 1 to %d", fl.IDs, verify.MaxIDs)
	case fl.Duration < verify.MinDuration || fl.Duration > verify.MaxDuration:
		return e.usageErr("verify", "--duration %v: give %v to %v", fl.Duration, verify.MinDuration, verify.MaxDuration)
	case e.given["shards"] && (fl.Shards < 1 || fl.Shards > wire.MaxShards):
		return e.usageErr("verify", "--shards %d: give 1 to %d", fl.Shards, wire.MaxShards)
	}
	faults, err := verify.ParseFaults(fl.Faults)
	if err != nil {
		return e.usageErr("verify", "--faults %q: %s", fl.Faults, configMsg(err))
	}
	exe, err := os.Executable()
	if err != nil {
		return e.fail(err)
	}
	cfg := verify.Config{
		Conn:     verify.Conn{URL: e.server, Access: e.access, Timeout: e.timeout},
		Duration: fl.Duration, IDs: fl.IDs, Faults: faults, Replicas: fl.Replicas, Shards: fl.Shards, Owners: fl.Owners, TTL: fl.TTL,
		OwnerCommand: func() *exec.Cmd {
			cmd := exec.Command(exe, verifyOwnerCommand)
			cmd.SysProcAttr = handlerProcAttr() // own process group (Ctrl-C is the parent's), killed with the parent
			return cmd
		},
		Log: e.log,
	}
	if !fl.Quiet {
		cfg.Progress = func(format string, a ...any) {
			fmt.Fprintf(e.err, "verify: %s\n", fmt.Sprintf(format, a...))
		}
	}
	if err := cfg.Validate(); err != nil {
		return e.usageErr("verify", "%s", configMsg(err))
	}
	// The world's name and the history file come first: a history that
	// cannot be written is known before anything is created. Without
	// --history it goes to the OS temp dir, not the working directory (a
	// run's history is megabytes), and the verdict line names it.
	cfg.World = verify.NewWorldName()
	path := fl.History
	if path == "" {
		path = filepath.Join(os.TempDir(), cfg.World+".jsonl")
	}
	hf, err := os.Create(path)
	if err != nil {
		return e.fail(fmt.Errorf("the history file: %w", err))
	}
	defer hf.Close()
	if cfg.Progress != nil {
		cfg.Progress("history to %s", path)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := verify.Run(ctx, cfg)
	if res == nil {
		hf.Close()
		os.Remove(path) // nothing was recorded
		if errors.Is(err, verify.ErrInvalidConfig) {
			return e.usageErr("verify", "%s", configMsg(err))
		}
		return e.fail(err)
	}
	if werr := verify.WriteHistory(hf, &res.Recorded); werr != nil {
		err = errors.Join(err, fmt.Errorf("write the history to %s: %w", path, werr))
	} else if werr := hf.Close(); werr != nil {
		err = errors.Join(err, fmt.Errorf("write the history to %s: %w", path, werr))
	}
	switch {
	case err != nil && ctx.Err() != nil && !errors.Is(err, verify.ErrWorldLeft):
		return e.fail(fmt.Errorf("interrupted: world %s removed; history so far in %s", res.Meta.World, path))
	case err != nil:
		return e.fail(err)
	}
	return printVerdict(e, &res.Recorded, res.Verdict, path)
}

// configMsg is a refused configuration's reason, without the prefix the
// usage line makes redundant.
func configMsg(err error) string {
	return strings.TrimPrefix(err.Error(), verify.ErrInvalidConfig.Error()+": ")
}

// verifyFile checks a history file written by an earlier run.
func verifyFile(e *env, path string) int {
	f, err := os.Open(path)
	if err != nil {
		return e.fail(err)
	}
	defer f.Close()
	rec, err := verify.ReadHistory(f)
	if err != nil {
		return e.fail(err)
	}
	return printVerdict(e, rec, verify.Check(rec), path)
}

// printVerdict prints one line per invariant, verdict word first, then
// the outcome (passed, violated, inconclusive); with --json one object.
// The examples of violations and the reasons of an inconclusive run go to
// stderr. Exit 0 only when the run passed.
func printVerdict(e *env, rec *verify.Recorded, v verify.Verdict, path string) int {
	code := exitOK
	if v.Outcome != verify.Passed {
		code = exitError
	}
	m := rec.Meta
	head := []field{f("world", m.World), f("replicas", m.Replicas)}
	if m.Partitions > 0 {
		head = append(head, f("partitions", m.Partitions))
	}
	if m.Shards > 0 {
		head = append(head, f("shards", m.Shards))
	}
	if e.json {
		e.emit(v.Outcome, append(head, f("duration", m.Duration.String()), f("history", path),
			f("invariants", v.Invariants), f("faults", v.Faults), f("figures", v.Figures), f("reasons", v.Reasons), f("examples", v.Examples))...)
		return code
	}
	for _, inv := range v.Invariants {
		word := "ok"
		if !inv.OK {
			word = "VIOLATED"
		}
		fmt.Fprintf(e.out, "%-9s %-17s %d of %d %s: %s\n", word, inv.Name, inv.Count, inv.Of, inv.Unit, inv.What)
	}
	for _, r := range v.Reasons {
		fmt.Fprintf(e.err, "inconclusive: %s\n", r)
	}
	for _, x := range v.Examples {
		fmt.Fprintf(e.err, "  %s\n", x)
	}
	e.emit(v.Outcome, append(head, f("duration", m.Duration.String()), f("faults", faultCounts(v.Faults)),
		f("posted", v.Figures["posted"]), f("deliveries", v.Figures["deliveries"]), f("duplicates", v.Figures["duplicates"]),
		f("takeovers", v.Figures["takeovers"]), f("commits", v.Figures["commits"]), f("history", path))...)
	return code
}

func faultCounts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	var b []string
	for _, k := range ks {
		b = append(b, fmt.Sprintf("%s:%d", k, m[k]))
	}
	return strings.Join(b, ",")
}
