package faults

import (
	"os"
	"testing"
	"time"
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
	return []scenario{
		owners,
		mk("proxy", Single, true, ProxyCut, ProxyLatency, ProxyRefuse, ProxyCut, ProxyLatency, ProxyRefuse, ProxyCut, ProxyLatency, ProxyRefuse),
		mk("server-sync-always", ServerAlways, false, ServerCrash, ServerCrash, ServerCrash),
		mk("server-sync-interval", ServerInterval, false, ServerCrash, ServerCrash, ServerCrash),
		mk("cluster", Cluster, false, NodeKill, NodeKill, NodeKill),
	}
}

// TestFaults is the CI-sized run (part of `go test -race -count=1 -p 1
// ./...`). FP_FAULTS=name runs one scenario.
func TestFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("fault runs take minutes")
	}
	only := os.Getenv("FP_FAULTS")
	for _, sc := range ciScenarios() {
		if only != "" && only != sc.Name {
			continue
		}
		t.Run(sc.Name, func(t *testing.T) {
			res := run(t, sc)
			verify(t, sc, res)
		})
	}
}
