package faults

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/fencepost/fencepost/world"
)

var soakFor = flag.Duration("soak", 0, "run TestSoak for this long (make soak); 0 skips it")

// soakScenarios are the rounds of the soak, in rotation: every fault kind,
// mixed, on each deployment.
func soakScenarios(round time.Duration) []scenario {
	base := scenario{IDs: 16, Owners: 3, TTL: time.Second, Gap: 1500 * time.Millisecond, Lin: 3, Backlog: 20000, Final: 3 * time.Minute, Work: 0, For: round}
	mk := func(name, deploy string, proxy bool, faults ...string) scenario {
		s := base
		s.Name, s.Deploy, s.Proxy, s.Faults = name, deploy, proxy, faults
		return s
	}
	scs := []scenario{
		mk("mixed-interval", ServerInterval, true, OwnerKill, ProxyCut, OwnerStop, ProxyLatency, OwnerKill, ServerCrash, OwnerStop, ProxyRefuse),
		mk("cluster", Cluster, false, NodeKill, OwnerKill, OwnerStop, NodeKill, OwnerKill),
		mk("mixed-always", ServerAlways, true, OwnerStop, ProxyCut, OwnerKill, ServerCrash, ProxyLatency, OwnerStop, ProxyRefuse, OwnerKill),
	}
	// Per-id state (docs/design.md 3.12): the owners and the final drain count each
	// id's messages in its state; every counter must end exact.
	counter := mk("counter", ServerInterval, true, OwnerKill, OwnerSeize, OwnerStop, ProxyCut, OwnerSeize, ServerCrash, OwnerKill, OwnerStop, OwnerSeize, ProxyRefuse)
	counter.Counter = true
	// The same on the default world of one replica: 64 partitions (docs/design/partitions.md).
	counterParts := counter
	counterParts.Name, counterParts.Partitions = "counter-partitioned", world.DefaultPartitions
	scs = append(scs, counter, counterParts)
	// A partitioned world (docs/design/partitions.md): owners of every id, each
	// reading the republished posts of its partitions, under the mixed
	// faults (a cut connection loses republished posts on the way).
	partitioned := mk("partitioned", ServerInterval, true, OwnerKill, ProxyCut, OwnerStop, ProxyLatency, OwnerKill, ServerCrash, OwnerStop, ProxyRefuse)
	partitioned.Partitions = 16
	// The same, its owners workers of the list of every id (docs/design/partitions.md).
	listed := partitioned
	listed.Name, listed.Listed = "partitioned-listed", true
	scs = append(scs, partitioned, listed)
	// A sharded world (docs/design.md 3.14), 8 shards for the 16 ids:
	// owners serving shards under the mixed faults and forced seizes of
	// shard units, checked per shard (history.CheckShards); and per-id
	// state on it, every counter exact.
	sharded := mk("sharded", ServerInterval, true, OwnerKill, ProxyCut, OwnerSeize, OwnerStop, ProxyLatency, OwnerKill, ServerCrash, OwnerSeize, OwnerStop, ProxyRefuse)
	sharded.Shards = 8
	counterShards := counter
	counterShards.Name, counterShards.Shards = "counter-sharded", 8
	scs = append(scs, sharded, counterShards)
	parts := mk("partitions", ClusterRoutes, false, PartMinority, OwnerKill, PartIsolate, OwnerStop, PartFlap, PartMinority, PartFlap)
	parts.Cut, parts.MinorityOf = 6*time.Second, "mailbox" // the mailbox leader only, as CI before read barriers (docs/reliability.md section 6: not yet run with the bucket leader)
	scs = append(scs, parts)
	if fakeClockSupported {
		clocks := func(name string, c map[int]clockSpec, beyond bool, faults ...string) scenario {
			s := mk(name, Single, false, faults...)
			s.OwnerProxies, s.Clocks, s.BeyondBounds, s.Work = true, c, beyond, time.Millisecond
			return s
		}
		scs = append(scs,
			// Rates of 0.01% keep the two clocks within delta over a
			// whole round (a process may live that long): 40 ms + 0.02%.
			clocks("clocks-within", map[int]clockSpec{0: {Skew: 20 * time.Millisecond, Rate: 0.0001}, 1: {Skew: -20 * time.Millisecond, Rate: -0.0001}}, false,
				OwnerIsolate, OwnerKill, OwnerIsolate, OwnerStop, OwnerIsolate),
			clocks("clocks-beyond", map[int]clockSpec{0: {Skew: -600 * time.Millisecond, Rate: -0.01, Jump: 2 * time.Second}, 1: {Skew: time.Second, Rate: 0.01}}, true,
				OwnerIsolate, ClockJumpBack, OwnerIsolate, OwnerKill, ClockJumpFwd, OwnerIsolate, OwnerIsolate))
	}
	return scs
}

// TestSoak runs fault rounds until -soak has passed (at least one round)
// and prints a summary of all of them. Every round must keep every
// invariant and have a linearizable ownership history.
//
//	go test -run TestSoak -timeout 0 -v ./testkit/faults/ -soak 30m
func TestSoak(t *testing.T) {
	d := *soakFor
	if d == 0 {
		if v := os.Getenv("FP_SOAK"); v != "" {
			var err error
			if d, err = time.ParseDuration(v); err != nil {
				t.Fatal(err)
			}
		}
	}
	if d == 0 {
		t.Skip("soak not asked for: -soak 30m (or FP_SOAK=30m)")
	}
	roundFor := 150 * time.Second
	if v := os.Getenv("FP_SOAK_ROUND"); v != "" {
		roundFor, _ = time.ParseDuration(v)
	}
	start := time.Now()
	var (
		total                            = outcome{Faults: map[string]int{}, Takeovers: map[string]int{}}
		rounds, linOK, linBad, linUnsure int
		staleBeyond, delivBeyond         int // stale deliveries in rounds beyond the clock bounds (counted apart: not failures there)
		counters                         counterFigures
		counterRounds, seizes            int
		staleSeized                      int // stale deliveries of holders displaced by a forced seize (counted apart)
		stalePaused                      int // stale deliveries of calls decided before a pause (counted apart)
		dupPct                           []string
		shards                           shardTally
	)
	scs := soakScenarios(roundFor)
	if only := os.Getenv("FP_SOAK_ONLY"); only != "" { // some kinds of round: names, comma-separated
		var keep []scenario
		for _, sc := range scs {
			if slices.Contains(strings.Split(only, ","), sc.Name) {
				keep = append(keep, sc)
			}
		}
		if len(keep) == 0 {
			t.Fatalf("FP_SOAK_ONLY=%s names no round of %s", only, names(scs))
		}
		scs = keep
	}
	for i := 0; i == 0 || time.Since(start) < d; i++ {
		sc := scs[i%len(scs)]
		sc.Name = fmt.Sprintf("round %d %s", i+1, sc.Name)
		var res outcome
		ok := t.Run(sc.Name, func(t *testing.T) {
			res = run(t, sc)
			verify(t, sc, res)
		})
		rounds++
		r, tr := res.Report, &total.Report
		tr.Sends += r.Sends
		tr.Posted += r.Posted
		tr.Refused += r.Refused
		tr.Unknown += r.Unknown
		tr.Deliveries += r.Deliveries
		tr.Distinct += r.Distinct
		tr.Duplicates += r.Duplicates
		tr.Commits += r.Commits
		tr.Takeovers += r.Takeovers
		tr.Lost += r.Lost
		tr.Unexpected += r.Unexpected
		switch {
		case sc.BeyondBounds:
			staleBeyond += r.StaleDeliveries
			delivBeyond += r.Deliveries
		case sc.Counter:
			tr.StaleDeliveries += res.StaleOthers
			staleSeized += res.SeizedStale
			counterRounds++
			seizes += len(res.seizes)
			counters.Checked += res.Counters.Checked
			counters.Off += res.Counters.Off
			counters.Counted += res.Counters.Counted
			counters.Stored += res.Counters.Stored
		default:
			// Without a forced seize StaleOthers is every stale delivery.
			tr.StaleDeliveries += res.StaleOthers
			staleSeized += res.SeizedStale
			seizes += len(res.seizes)
		}
		if sc.Shards > 0 {
			shards.rounds++
			shards.commits += r.Commits
			shards.unfenced += len(res.Unfenced)
			shards.unattributed += res.Coverage.Unattributed
			shards.read += res.Coverage.Read
			shards.skipped += res.Coverage.Skipped
		}
		stalePaused += res.PausedStale
		tr.StaleCommits += r.StaleCommits
		tr.Order += r.Order
		tr.CursorBack += r.CursorBack
		tr.StoredTwice += r.StoredTwice
		for k, v := range res.Faults {
			total.Faults[k] += v
		}
		for k, v := range res.Takeovers {
			total.Takeovers[k] += v
		}
		total.StaleWoken += res.StaleWoken
		total.Fences += res.Fences
		total.OwnerStarts += res.OwnerStarts
		total.UnknownSends += res.UnknownSends
		total.Lin.Ops += res.Lin.Ops
		total.Lin.Unknown += res.Lin.Unknown
		switch res.Lin.Result {
		case porcupine.Ok:
			linOK++
		case porcupine.Illegal:
			linBad++
		default:
			linUnsure++
		}
		dupPct = append(dupPct, fmt.Sprintf("%.2f", r.DuplicatePct()))
		fmt.Printf("SOAK after %d rounds (%v, last round ok=%v): %s | beyond the clock bounds: %d stale deliveries of %d | calls decided before a pause: %d stale deliveries (counted apart) | %s | %s\n", rounds, time.Since(start).Round(time.Second), ok, soakSummary(total, linOK, linBad, linUnsure), staleBeyond, delivBeyond, stalePaused, counterSummary(counterRounds, counters, seizes, staleSeized), shards)
		for _, n := range res.Notes {
			fmt.Printf("SOAK round %d: %s\n", rounds, n)
		}
	}
	total.Duration = time.Since(start)
	fmt.Printf("SOAK SUMMARY\n  command: go test -run TestSoak -timeout 0 -v ./testkit/faults/ -soak %v\n  rounds: %d (%v each of faults, rotating %s)\n  duration: %v\n  %s\n  beyond the clock bounds (not failures): %d stale deliveries of %d deliveries\n  calls decided before a pause (not failures): %d stale deliveries\n  %s\n  %s\n  duplicates per round (%%): %s\n",
		d, rounds, roundFor, names(scs), total.Duration.Round(time.Second), soakSummary(total, linOK, linBad, linUnsure), staleBeyond, delivBeyond, stalePaused, counterSummary(counterRounds, counters, seizes, staleSeized), shards, strings.Join(dupPct, " "))
}

// counterSummary: the counter rounds' figures (their stale deliveries
// other than a seized holder's are in the summary's stale deliveries).
func counterSummary(rounds int, c counterFigures, seizes, staleSeized int) string {
	return fmt.Sprintf("counter rounds %d: counters checked %d, off %d (summing to %d for %d messages stored); ids (shard units in sharded rounds) force-seized %d, stale deliveries of seized holders %d (counted apart)",
		rounds, c.Checked, c.Off, c.Counted, c.Stored, seizes, staleSeized)
}

// shardTally: the sharded rounds' figures.
type shardTally struct {
	rounds, commits, unfenced, unattributed int
	read                                    int
	skipped                                 uint64
}

func (s shardTally) String() string {
	return fmt.Sprintf("sharded rounds %d: %d shard cursor writes checked (%d bucket messages read, %d replaced before they were read, %d whose holder nothing names), %d without their record's fence",
		s.rounds, s.commits, s.read, s.skipped, s.unattributed, s.unfenced)
}

func names(scs []scenario) string {
	var n []string
	for _, s := range scs {
		n = append(n, s.Name)
	}
	return strings.Join(n, ", ")
}

func soakSummary(o outcome, linOK, linBad, linUnsure int) string {
	kinds := func(m map[string]int) string {
		var ks []string
		sum := 0
		for k, v := range m {
			ks = append(ks, k)
			sum += v
		}
		sort.Strings(ks)
		var b []string
		for _, k := range ks {
			b = append(b, fmt.Sprintf("%s=%d", k, m[k]))
		}
		return fmt.Sprintf("%d (%s)", sum, strings.Join(b, ", "))
	}
	r := o.Report
	return fmt.Sprintf("messages posted %d (sends %d, unknown %d, refused %d), deliveries %d, duplicates %d (%.3f%%), commits %d | faults %s | takeovers %s | stale owners woken and fenced %d, self-fences %d, owner process starts %d, send attempts of unknown outcome %d | lost %d, unexpected %d, stale deliveries %d, stale commits %d, order %d, cursor back %d, stored twice %d | linearizability: %d rounds ok, %d illegal, %d undecided, %d ownership ops (%d unknown outcome)",
		r.Posted, r.Sends, r.Unknown, r.Refused, r.Deliveries, r.Duplicates, r.DuplicatePct(), r.Commits,
		kinds(o.Faults), kinds(o.Takeovers), o.StaleWoken, o.Fences, o.OwnerStarts, o.UnknownSends,
		r.Lost, r.Unexpected, r.StaleDeliveries, r.StaleCommits, r.Order, r.CursorBack, r.StoredTwice, linOK, linBad, linUnsure, o.Lin.Ops, o.Lin.Unknown)
}
