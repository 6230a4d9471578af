package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/fencepost/fencepost/bench"
	"github.com/fencepost/fencepost/client"
)

// Flags of the bench command.
var (
	flagBenchScenario string
	flagBenchSize     string
	flagBenchEmbedded bool
	flagBenchIDs      int
	flagBenchDuration time.Duration
	flagBenchQuiet    bool
	benchFlags        *flagSet // to tell whether --server was given
)

func init() {
	register("bench", &command{
		usage: "bench [--scenario steady] [--size smoke|full] [--embedded | --server URL]",
		short: "benchmark delivery beside raw JetStream on the same server; exit 1 if a message was lost or committed under a stale epoch",
		flags: func(fs *flagSet) {
			benchFlags = fs
			fs.StringVar(&flagBenchScenario, "scenario", bench.ScenarioSteady, "scenario: steady (takeover, handoff and fan-in are not implemented yet)")
			fs.StringVar(&flagBenchSize, "size", bench.SizeSmoke, "size: smoke (about 20-30 s) or full (a few minutes)")
			fs.BoolVar(&flagBenchEmbedded, "embedded", true, "run an embedded server with its store in a temporary directory; the default unless --server is given")
			fs.IntVar(&flagBenchIDs, "ids", 0, "mailboxes (default: the size's)")
			fs.DurationVar(&flagBenchDuration, "duration", 0, "posting time of each side (default: the size's)")
			fs.BoolVar(&flagBenchQuiet, "quiet", false, "no progress line on stderr")
		},
		run: runBench,
	})
}

func runBench(e *env, args []string) int {
	if len(args) != 0 {
		return e.usageErr("bench", "takes no arguments, got %d", len(args))
	}
	if flagBenchScenario != bench.ScenarioSteady {
		return e.usageErr("bench", "--scenario %q: only steady is implemented so far", flagBenchScenario)
	}
	if _, ok := bench.Sizes[flagBenchSize]; !ok {
		return e.usageErr("bench", "--size %q: use smoke or full", flagBenchSize)
	}
	serverGiven, embeddedGiven := false, false
	benchFlags.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "server":
			serverGiven = true
		case "embedded":
			embeddedGiven = true
		}
	})
	embedded := flagBenchEmbedded
	if serverGiven && !embeddedGiven {
		embedded = false
	}
	if serverGiven && embeddedGiven && embedded {
		return e.usageErr("bench", "give --server or --embedded, not both")
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg := bench.Config{Scenario: flagBenchScenario, Size: flagBenchSize, IDs: flagBenchIDs, Duration: flagBenchDuration, Log: e.log}
	where := "an embedded server"
	if !embedded {
		// The user's server, with the connection flags (creds, TLS) of every
		// command, and a longer JetStream timeout than a single operation's.
		e.clientOpts = append(e.clientOpts, client.WithTimeout(max(e.timeout, 30*time.Second)))
		c, err := e.client()
		if err != nil {
			return e.fail(err)
		}
		cfg.Client = c
		where = e.server
	}
	if !flagBenchQuiet {
		fmt.Fprintf(e.err, "bench %s (%s) on %s\n", cfg.Scenario, cfg.Size, where)
		cfg.Progress = func(p bench.Progress) {
			phase := "posting"
			if p.Elapsed > p.Duration {
				phase = "settling"
			}
			fmt.Fprintf(e.err, "\rround %d/%d  %-9s %-8s %4.1f/%.1fs  sent %-9d delivered %-9d", p.Round, p.Rounds, p.Side, phase, p.Elapsed.Seconds(), p.Duration.Seconds(), p.Sent, p.Delivered)
		}
	}
	rep, err := bench.Run(ctx, cfg)
	if !flagBenchQuiet {
		fmt.Fprintln(e.err)
	}
	if err != nil {
		return e.fail(err)
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
	if !rep.OK() {
		fmt.Fprintf(e.err, "fencepost bench: FAILED: %d lost, %d stale-epoch commits (both must be 0)\n", rep.Lost, rep.StaleCommits)
		return exitError
	}
	return exitOK
}

func printBenchTable(e *env, r bench.Report) {
	fmt.Fprintf(e.out, "scenario %s, size %s: %d ids, %.0f s of posting per side in %d alternating rounds\n\n", r.Scenario, r.Size, r.IDs, r.Seconds, r.Rounds)
	tw := tabwriter.NewWriter(e.out, 0, 0, 2, ' ', tabwriter.AlignRight)
	ratio := func(a, b float64) string {
		if b == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2fx", a/b)
	}
	fmt.Fprintln(tw, "\tfencepost\traw JetStream\tours/raw\t")
	fmt.Fprintf(tw, "sent msgs/s\t%.0f\t%.0f\t%s\t\n", r.SendThroughput, r.RawSendThroughput, ratio(r.SendThroughput, r.RawSendThroughput))
	fmt.Fprintf(tw, "delivered msgs/s\t%.0f\t%.0f\t%.2fx\t\n", r.Throughput, r.RawThroughput, r.Ratio)
	fmt.Fprintf(tw, "latency p50 ms\t%.2f\t%.2f\t\t\n", r.LatencyP50, r.RawLatencyP50)
	fmt.Fprintf(tw, "latency p99 ms\t%.2f\t%.2f\t\t\n", r.LatencyP99, r.RawLatencyP99)
	fmt.Fprintf(tw, "latency p999 ms\t%.2f\t%.2f\t\t\n", r.LatencyP999, r.RawLatencyP999)
	fmt.Fprintf(tw, "messages sent\t%d\t%d\t\t\n", r.Sent, r.RawSent)
	fmt.Fprintf(tw, "duplicates %%\t%.4f\t\t\t\n", r.DuplicatesPct)
	fmt.Fprintf(tw, "lost\t%d\t%d\t\t\n", r.Lost, r.RawLost)
	fmt.Fprintf(tw, "stale-epoch commits\t%d of %d checked\t\t\t\n", r.StaleCommits, r.StaleChecked)
	fmt.Fprintf(tw, "takeover gap p99 ms\t%.1f\t\t\t\n", r.TakeoverGapP99)
	tw.Flush()
}
