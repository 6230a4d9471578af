//go:build bench

package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/fencepost/fencepost/bench"
)

// printCallTable prints the call scenario's outcome: fencepost's calls
// against raw NATS request-reply.
func printCallTable(e *env, r bench.Report) {
	c := r.Calls
	fmt.Fprintf(e.out, "scenario %s, size %s: %d ids, %d callers (one call in flight each), %.0f s of calls per side in %d alternating rounds", r.Scenario, r.Size, r.IDs, c.Callers, r.Seconds, r.Rounds)
	if r.Partitions > 0 {
		fmt.Fprintf(e.out, ", %d partitions", r.Partitions)
	}
	if r.Cluster > 0 {
		fmt.Fprintf(e.out, ", an embedded %d-member cluster", r.Cluster)
	}
	if r.Replicas > 1 {
		fmt.Fprintf(e.out, ", R%d streams", r.Replicas)
	}
	fmt.Fprint(e.out, "\nfencepost: World.Call to one worker, answered after the commit; raw: nats.Conn.Request to one subscriber\n\n")
	tw := tabwriter.NewWriter(e.out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\tfencepost\traw request-reply\tours/raw\t")
	fmt.Fprintf(tw, "calls/s\t%.0f\t%.0f\t%.2fx\t\n", c.Ours.PerSecond, c.Raw.PerSecond, c.Ratio)
	fmt.Fprintf(tw, "latency p50 ms\t%.2f\t%.2f\t\t\n", c.Ours.LatencyP50, c.Raw.LatencyP50)
	fmt.Fprintf(tw, "latency p99 ms\t%.2f\t%.2f\t\t\n", c.Ours.LatencyP99, c.Raw.LatencyP99)
	fmt.Fprintf(tw, "latency max ms\t%.2f\t%.2f\t\t\n", c.Ours.LatencyMax, c.Raw.LatencyMax)
	fmt.Fprintf(tw, "calls answered\t%d\t%d\t\t\n", c.Ours.Calls, c.Raw.Calls)
	fmt.Fprintf(tw, "timeouts\t%d\t%d\t\t\n", c.Ours.Timeouts, c.Raw.Timeouts)
	fmt.Fprintf(tw, "other errors\t%d\t%d\t\t\n", c.Ours.Failed, c.Raw.Failed)
	_ = tw.Flush()
}
