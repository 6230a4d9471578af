package faults

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/server/servertest"
)

// TestRouteNet_HoldProbe measures what nats-server does when the routes of
// a stream's leader stop passing bytes without being closed: both ways
// (silent), only what the leader sends (out), only what it receives (in),
// and both ways or in only for 100 s (past nats-server's route pings:
// every 30 s, a route closed with 2 of them unanswered). For each it logs when the
// others elected a new leader, when the old one stopped calling itself
// leader, which routes nats-server closed and why, and, in the 15 s after
// the hold ended, how long the stream had no leader or two
// (docs/reliability.md 3.2). FP_ROUTE_PROBE=1 runs it (about 6 min),
// FP_ROUTE_PROBE=in,silent-100s some of its modes.
func TestRouteNet_HoldProbe(t *testing.T) {
	if os.Getenv("FP_ROUTE_PROBE") == "" {
		t.Skip("FP_ROUTE_PROBE=1 runs it")
	}
	rn := newRouteNet(t)
	_, js := servertest.Connect(t, rn.Cluster().URL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const stream = "PROBE"
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{"probe.>"}, Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	// Traffic: one publish every 5 ms, answers or not.
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			pctx, pcancel := context.WithTimeout(context.Background(), time.Second)
			js.Publish(pctx, "probe.x", []byte(strings.Repeat("x", 200)))
			pcancel()
		}
	}()
	for _, mode := range []struct {
		name    string
		out, in bool
		hold    time.Duration // 0: until both leader changes, then heldPast more (at most heldCap)
	}{{"silent", true, true, 0}, {"out", true, false, 0}, {"in", false, true, 0}, {"silent-100s", true, true, 100 * time.Second}, {"in-100s", false, true, 100 * time.Second}} {
		if only := os.Getenv("FP_ROUTE_PROBE"); only != "1" && !strings.Contains(","+only+",", ","+mode.name+",") {
			continue
		}
		if !waitUntil(60*time.Second, func() bool { return rn.healthy() == nil }) {
			t.Fatalf("not whole before %s: %v", mode.name, rn.healthy())
		}
		victim := rn.stableLeader(stream, 2*time.Second, 60*time.Second)
		if victim < 0 {
			t.Fatalf("no member led %s alone for 2 s before %s", stream, mode.name)
		}
		acc := rn.accepted(victim)
		routes := rn.Nodes[victim].NumRoutes()
		start := time.Now()
		rn.Hold(victim, mode.out, mode.in)
		w := rn.watchHold(stream, victim, start, mode.hold)
		elected, stepped, minRoutes, othersNone := w.elected, w.stepped, min(routes, w.minRoutes), w.othersNone
		held := time.Since(start)
		elections := len(rn.logged(start, "new stream leader for '$G > "+stream+"'"))
		accHeld := rn.accepted(victim) - acc
		rn.Release()
		released := time.Now()
		// For 15 s after the release: how long no member (or more than
		// one) called itself the stream's leader, and how often its leader
		// changed.
		var none, two time.Duration
		changes, last := 0, rn.leader(stream)
		for tick := time.Now(); time.Since(released) < 15*time.Second; {
			time.Sleep(20 * time.Millisecond)
			_, leaders := rn.leaders(stream)
			switch {
			case leaders == 0:
				none += time.Since(tick)
			case leaders > 1:
				two += time.Since(tick)
			}
			if l := rn.leader(stream); l >= 0 && l != last {
				changes++
				last = l
			}
			tick = time.Now()
		}
		t.Logf("%s: during the hold, %d elections of a stream leader; after the first, the others had none for about %v", mode.name, elections, othersNone)
		t.Logf("%s: victim %s (%d routes): held %v; new leader after %v, old one stopped leading after %v; victim's routes at least %d during the hold; %d route connections accepted during the hold, %d after; in the 15 s after the release: no stream leader for %v, two for %v, %d leader changes; healthy now: %v",
			mode.name, rn.Nodes[victim].Name(), routes, held.Round(time.Millisecond), elected.Round(time.Millisecond), stepped.Round(time.Millisecond), minRoutes, accHeld, rn.accepted(victim)-acc-accHeld, none.Round(time.Millisecond), two.Round(time.Millisecond), changes, rn.healthy())
		for _, l := range append(rn.routeEvents(start), rn.logged(start, stream)...) {
			t.Logf("%s:   %s", mode.name, l)
		}
	}
}
