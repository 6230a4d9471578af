package faults

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencepost/fencepost/world"
)

// ciScenarios are the CI-sized runs: every fault type at least 3 times.
func ciScenarios() []scenario {
	base := scenario{IDs: 6, Owners: 3, TTL: time.Second, Gap: 1200 * time.Millisecond, Pace: 5 * time.Millisecond, Lin: 3, Backlog: 2000, Final: 60 * time.Second}
	mk := func(name, deploy string, proxy bool, faults ...string) scenario {
		s := base
		s.Name, s.Deploy, s.Proxy, s.Faults = name, deploy, proxy, faults
		return s
	}
	owners := mk("owners", Single, false, OwnerKill, OwnerStop, OwnerKill, OwnerStop, OwnerKill, OwnerStop)
	owners.Work = time.Millisecond // so that a pause lands inside a batch
	// Partitions between cluster members: an isolation or a flapping
	// lasts cut; a minority leader stays cut off until the majority has a
	// new leader and the old one has stepped down (partition in
	// partition_test.go).
	part := func(name string, cut time.Duration, faults ...string) scenario {
		s := mk(name, ClusterRoutes, false, faults...)
		s.Cut = cut
		return s
	}
	// The minority leader: the mailbox stream's, then the bucket stream's
	// (a deposed bucket leader answered stale ownership reads until read
	// barriers: docs/reliability.md section 6), healed once the old leader
	// stepped down. The flapping link: one route, or every route of the
	// bucket stream's leader.
	partMinority := part("partition-minority", 0, PartMinority, PartMinority)
	flapLeader := part("partition-flap-leader", 5*time.Second, PartFlap, PartFlap)
	flapLeader.FlapLeader = true
	// Per-id state (docs/design.md 3.12): owners counting each id's messages in its
	// state, killed, stopped past their ttl, their ids force-seized while
	// live, and the server crashed once; every counter must end exact.
	counter := mk("counter", ServerInterval, false, OwnerKill, OwnerSeize, OwnerStop, OwnerSeize, ServerCrash, OwnerKill, OwnerStop, OwnerSeize, OwnerKill, OwnerStop)
	counter.Counter = true
	// A partitioned world (docs/design/partitions.md): owners of every id, each reading the
	// posts of its partitions; killed and stopped as in owners, and cut
	// off through the proxy, which loses republished posts on the way.
	partitioned := mk("partitioned", Single, true, OwnerKill, ProxyCut, OwnerStop, OwnerKill, ProxyLatency, OwnerStop, ProxyCut)
	partitioned.Partitions = 16
	// The same, its owners workers of the list of every id: each
	// subscribes to each id's posts (docs/design/partitions.md).
	listed := partitioned
	listed.Name, listed.Listed = "partitioned-listed", true
	// Counter on the world fencepost world add makes on one replica: 64
	// partitions (docs/design/partitions.md, "The default"), the server crashed under it.
	counterParts := counter
	counterParts.Name, counterParts.Partitions = "counter-partitioned", world.DefaultPartitions
	// A sharded world (docs/design.md 3.14), 4 shards for the 6 ids (three
	// shards of two ids each): owners serving shards, killed, stopped past
	// their ttl, a live holder's shard units force-seized, and every
	// client cut off through the proxy; checked per shard as fencepost
	// verify --shards checks (history.CheckShards).
	sharded := mk("sharded", Single, true, OwnerKill, OwnerSeize, OwnerStop, ProxyCut, OwnerKill, OwnerSeize, OwnerStop, ProxyCut)
	sharded.Shards = 4
	// Per-id state on a sharded world: the counter scenario's faults, the
	// server crashed under it; every counter exact.
	counterShards := counter
	counterShards.Name, counterShards.Shards = "counter-sharded", 4
	scs := []scenario{
		owners,
		partitioned,
		listed,
		counter,
		counterParts,
		sharded,
		counterShards,
		mk("proxy", Single, true, ProxyCut, ProxyLatency, ProxyRefuse, ProxyCut, ProxyLatency, ProxyRefuse, ProxyCut, ProxyLatency, ProxyRefuse),
		mk("server-sync-always", ServerAlways, false, ServerCrash, ServerCrash, ServerCrash),
		mk("server-sync-interval", ServerInterval, false, ServerCrash, ServerCrash, ServerCrash),
		mk("cluster", Cluster, false, NodeKill, NodeKill, NodeKill),
		partMinority,
		part("partition-isolated", 6*time.Second, PartIsolate, PartIsolate),
		part("partition-flap", 5*time.Second, PartFlap, PartFlap),
		flapLeader,
	}
	if fakeClockSupported {
		scs = append(scs, clockScenarios(base)...)
	}
	return scs
}

// clockScenarios: owners with faulted clocks (fakeclock_test.go) on one
// server, each owner behind a proxy of its own so that one can be cut off
// while it runs (OwnerIsolate), with ttl 1 s against the documented bounds
// delta = 100 ms and rho = 0.001 (ownership.DefaultMaxSkew, DefaultMaxDrift).
func clockScenarios(base scenario) []scenario {
	mk := func(name string, clocks map[int]clockSpec, beyond bool, faults ...string) scenario {
		s := base
		s.Name, s.Deploy, s.Faults, s.OwnerProxies, s.Clocks, s.BeyondBounds = name, Single, faults, true, clocks, beyond
		// Handlers slower than the producers: a backlog, so an owner has a
		// batch in hand when it is cut off or its lease ends early.
		s.Work = 20 * time.Millisecond
		return s
	}
	return []scenario{
		// Within the bounds: one owner 20 ms ahead running 0.1% fast, one
		// 20 ms behind running 0.1% slow: at most 40 ms + 0.2% of a
		// process's life apart (checked to stay under delta).
		mk("clock-within", map[int]clockSpec{0: {Skew: 20 * time.Millisecond, Rate: 0.001}, 1: {Skew: -20 * time.Millisecond, Rate: -0.001}}, false,
			OwnerIsolate, OwnerIsolate, OwnerKill, OwnerIsolate, OwnerIsolate, OwnerKill),
		// Beyond them: one owner 600 ms behind running 1% slow (its leases
		// look to the others to end early: the unsafe direction), one 1 s
		// ahead running 1% fast (its leases look longer: liveness).
		mk("clock-beyond", map[int]clockSpec{0: {Skew: -600 * time.Millisecond, Rate: -0.01}, 1: {Skew: time.Second, Rate: 0.01}}, true,
			OwnerIsolate, OwnerIsolate, OwnerIsolate, OwnerIsolate, OwnerIsolate, OwnerIsolate),
		// Jumps of 2 s of one owner's wall clock, forward and back.
		mk("clock-jump", map[int]clockSpec{0: {Jump: 2 * time.Second}}, true,
			ClockJumpFwd, OwnerIsolate, ClockJumpBack, OwnerIsolate, ClockJumpBack, OwnerIsolate, ClockJumpFwd),
	}
}

// extraScenarios run only when FP_FAULTS names them: the minority
// leader cut off is always the bucket stream's (partition-minority-bucket);
// or always the mailbox stream's, the bucket stream's leadership moved off
// it first (partition-minority-mailbox, CI's version before read
// barriers); or either, four times, healed as soon as the majority has
// elected, while the old leader may still lead
// (partition-minority-heal-at-election: its final worker self-fences in
// about one run of four, with or without read barriers; docs/reliability.md
// section 6). Routes held instead of cut (partition in partition_test.go,
// docs/reliability.md 3.2): the mailbox stream's leader, then the bucket
// stream's, has its routes pass no bytes either way, no connection closed
// (partition-silent), or only its own bytes to the others
// (partition-asymmetric), until the majority has a new leader and the old
// one has stepped down, then the held bytes flow; or for 100 s, past
// nats-server's route pings, which close the held routes after 60 to 90 s
// (partition-silent-long, partition-asymmetric-long: until then the
// leader cut off keeps deposing the majority's leaders).
func extraScenarios() []scenario {
	var out []scenario
	for _, sc := range ciScenarios() {
		if sc.Name == "partition-minority" {
			bucket, mailbox, heal := sc, sc, sc
			bucket.Name, bucket.MinorityOf = "partition-minority-bucket", "bucket"
			mailbox.Name, mailbox.MinorityOf = "partition-minority-mailbox", "mailbox"
			heal.Name, heal.HealAtElection = "partition-minority-heal-at-election", true
			heal.Faults = []string{PartMinority, PartMinority, PartMinority, PartMinority}
			silent, asym := sc, sc
			silent.Name, silent.Faults = "partition-silent", []string{PartSilent, PartSilent}
			asym.Name, asym.Faults = "partition-asymmetric", []string{PartAsym, PartAsym}
			long, asymLong := silent, asym
			long.Name, long.Cut = "partition-silent-long", 100*time.Second
			asymLong.Name, asymLong.Cut = "partition-asymmetric-long", 100*time.Second
			out = append(out, bucket, mailbox, heal, silent, asym, long, asymLong)
		}
		if sc.Name == "cluster" {
			// A partitioned world on R3 (docs/design/partitions.md): members killed under
			// owners of every id, each reading its partitions' republished
			// posts, which a new stream leader may not republish.
			parts := sc
			parts.Name, parts.Partitions = "partitioned-cluster", 16
			out = append(out, parts)
		}
	}
	return out
}

// TestFaults is the CI-sized run (part of `go test -race -count=1 -p 1
// -timeout 15m ./...`: it takes 6-7 minutes of CI's, close to go test's
// default timeout of 10). FP_FAULTS=name[,name...] runs those scenarios;
// a name that is no scenario's fails the test (it would run nothing).
func TestFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("fault runs take minutes")
	}
	scs := ciScenarios()
	only := map[string]bool{}
	if env := os.Getenv("FP_FAULTS"); env != "" {
		scs = append(scs, extraScenarios()...)
		for name := range strings.SplitSeq(env, ",") {
			only[strings.TrimSpace(name)] = true
		}
		for name := range only {
			if !slices.ContainsFunc(scs, func(sc scenario) bool { return sc.Name == name }) {
				t.Fatalf("FP_FAULTS: no scenario is named %q", name)
			}
		}
	}
	for _, sc := range scs {
		if len(only) > 0 && !only[sc.Name] {
			continue
		}
		t.Run(sc.Name, func(t *testing.T) {
			res := run(t, sc)
			verify(t, sc, res)
		})
	}
}
