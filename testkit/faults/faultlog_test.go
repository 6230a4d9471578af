package faults

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencepost/fencepost/testkit/history"
)

// The fault log of a failed round: each injected fault with its target
// and its time from start to end (run records them), and, for each
// violation that has a time, the faults that overlap the faultWindow up
// to it (verify logs them), so that a stale delivery can be matched with
// the pause or the kill that caused it.

// faultAt is one injected fault: what, whom it hit (an owner's node, the
// server, a cluster member or route, "clients" of the proxy, seized ids)
// and when: from its start to its end (the SIGCONT, the restart, the end
// of a refusal, a latency, an isolation or a partition); end is zero for
// a fault of an instant (a kill, a cut).
type faultAt struct {
	kind, target string
	at, end      time.Time
}

func (f faultAt) String() string {
	if f.end.IsZero() {
		return fmt.Sprintf("%s of %s at %s", f.kind, f.target, f.at.Format(msTime))
	}
	return fmt.Sprintf("%s of %s from %s to %s", f.kind, f.target, f.at.Format(msTime), f.end.Format(msTime))
}

// msTime formats the times of the fault log.
const msTime = "15:04:05.000"

// violation is an example of a report with what it is about.
type violation struct {
	text string
	history.Violation
}

// violationsOf lists rep's examples of the given kinds (of every kind if
// none is given).
func violationsOf(rep history.Report, kinds ...string) []violation {
	var out []violation
	for i, v := range rep.Violations {
		if len(kinds) == 0 || slices.Contains(kinds, v.Kind) {
			out = append(out, violation{rep.Examples[i], v})
		}
	}
	return out
}

func texts(vs []violation) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.text)
	}
	return out
}

// failures are the examples of the round's violations that have a time:
// all but the lost messages, the keys stored twice (not a violation), and
// the stale deliveries that are no failure here (of seized holders, of
// calls decided before a pause, beyond the clock bounds).
func failures(sc scenario, res outcome) []violation {
	var out []violation
	for _, v := range violationsOf(res.Report, "unexpected", "order", "cursor back", "stale commit") {
		if !v.At.IsZero() {
			out = append(out, v)
		}
	}
	if !sc.BeyondBounds {
		out = append(out, res.StaleExamples...)
	}
	return out
}

// faultWindow is how long before a violation its faults are logged from.
const faultWindow = 10 * time.Second

// faultsAround are the faults whose time, from start to end (the start
// alone for a fault of an instant), overlaps the window up to at.
func faultsAround(faults []faultAt, at time.Time, window time.Duration) []faultAt {
	var out []faultAt
	for _, f := range faults {
		end := f.end
		if end.IsZero() {
			end = f.at
		}
		if !f.at.After(at) && !end.Before(at.Add(-window)) {
			out = append(out, f)
		}
	}
	return out
}

// logFaults logs, for each violation of a failed round that has a time,
// the faults in the faultWindow up to it; violations in a row (by time)
// with the same faults share one entry.
func logFaults(t testing.TB, name string, faults []faultAt, vs []violation) {
	vs = slices.Clone(vs)
	slices.SortStableFunc(vs, func(a, b violation) int { return a.At.Compare(b.At) })
	for i := 0; i < len(vs); {
		near := faultsAround(faults, vs[i].At, faultWindow)
		j := i + 1
		for j < len(vs) && slices.Equal(faultsAround(faults, vs[j].At, faultWindow), near) {
			j++
		}
		var b strings.Builder
		fmt.Fprintf(&b, "%s: %s (at %s)", name, vs[i].text, vs[i].At.Format(msTime))
		if j-i > 1 {
			fmt.Fprintf(&b, " and %d more violations up to %s", j-i-1, vs[j-1].At.Format(msTime))
		}
		if len(near) == 0 {
			fmt.Fprintf(&b, ": no fault in the %v up to it", faultWindow)
		} else {
			fmt.Fprintf(&b, ": faults in the %v up to it:", faultWindow)
		}
		for _, f := range near {
			b.WriteString("\n  " + f.String())
		}
		t.Logf("%s", b.String())
		i = j
	}
}

// faultsAround picks exactly the faults whose time, from start to end,
// overlaps the window up to a violation (both ends included): not those
// over before the window opens, nor those that start after the violation.
func TestFaultsAround_PicksTheOverlapping(t *testing.T) {
	v := time.Date(2026, 12, 2, 22, 22, 40, 203e6, time.Local)
	s := func(d time.Duration) time.Time { return v.Add(d) }
	faults := []faultAt{
		{kind: OwnerKill, target: "owner-0", at: s(-30 * time.Second)},                                               // 0: long before
		{kind: ProxyRefuse, target: "clients", at: s(-13 * time.Second), end: s(-10*time.Second - time.Millisecond)}, // 1: ended just before the window
		{kind: NodeKill, target: "n1", at: s(-12 * time.Second), end: s(-10 * time.Second)},                          // 2: ended at the window's start
		{kind: OwnerKill, target: "owner-2", at: s(-10 * time.Second)},                                               // 3: at the window's start
		{kind: ProxyCut, target: "clients", at: s(-4 * time.Second)},                                                 // 4: inside
		{kind: OwnerStop, target: "owner-1", at: s(-2 * time.Second), end: s(-time.Millisecond)},                     // 5: the pause, inside
		{kind: ServerCrash, target: "server", at: s(-time.Second), end: s(time.Second)},                              // 6: lasts past the violation
		{kind: OwnerKill, target: "owner-1", at: v},                                                                  // 7: at the violation
		{kind: OwnerStop, target: "owner-0", at: s(time.Millisecond), end: s(2 * time.Second)},                       // 8: after it
		{kind: PartIsolate, target: "n2", at: s(-20 * time.Second), end: s(5 * time.Second)},                         // 9: spans the whole window
	}
	var got []int
	for _, f := range faultsAround(faults, v, 10*time.Second) {
		got = append(got, slices.Index(faults, f))
	}
	if want := []int{2, 3, 4, 5, 6, 7, 9}; !slices.Equal(got, want) {
		t.Errorf("picked faults %v, want %v", got, want)
	}
	if got := faultsAround(faults, s(-time.Minute), 10*time.Second); len(got) != 0 {
		t.Errorf("a minute before every fault, picked %v", got)
	}
}

// logTB records what is logged.
type logTB struct {
	testing.TB
	lines []string
}

func (l *logTB) Logf(format string, args ...any) {
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

// A failed round logs, for a stale delivery, the pause of its holder with
// both ends; violations in a row with the same faults share one entry.
func TestLogFaults_AroundTheViolations(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 22, 22, 0, 0, time.Local)
	s := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	faults := []faultAt{
		{kind: OwnerKill, target: "owner-2", at: s(20000)},
		{kind: OwnerStop, target: "owner-1", at: s(38101), end: s(40190)},
		{kind: ProxyCut, target: "clients", at: s(55000)},
	}
	vs := []violation{
		{"stale delivery: mb-6 seq 527161 to owner-1/17", history.Violation{Kind: "stale delivery", ID: "mb-6", Seq: 527161, At: s(40210)}},
		{"stale delivery: mb-6 seq 527160 to owner-1/17", history.Violation{Kind: "stale delivery", ID: "mb-6", Seq: 527160, At: s(40203)}},
		{"stale commit: mb-6: owner-1/17 stored cursor 527161", history.Violation{Kind: "stale commit", ID: "mb-6", Seq: 527161, At: s(56000)}},
		{"order: mb-7", history.Violation{Kind: "order", ID: "mb-7", Seq: 9, At: s(90000)}},
	}
	l := &logTB{TB: t}
	logFaults(l, "round 3 mixed-always", faults, vs)
	want := []string{
		"round 3 mixed-always: stale delivery: mb-6 seq 527160 to owner-1/17 (at 22:22:40.203) and 1 more violations up to 22:22:40.210: faults in the 10s up to it:\n" +
			"  owner-stop of owner-1 from 22:22:38.101 to 22:22:40.190",
		"round 3 mixed-always: stale commit: mb-6: owner-1/17 stored cursor 527161 (at 22:22:56.000): faults in the 10s up to it:\n" +
			"  proxy-cut of clients at 22:22:55.000",
		"round 3 mixed-always: order: mb-7 (at 22:23:30.000): no fault in the 10s up to it",
	}
	if !slices.Equal(l.lines, want) {
		t.Errorf("logged:\n%s\nwant:\n%s", strings.Join(l.lines, "\n"), strings.Join(want, "\n"))
	}
}

// A round that failed on a stale delivery alone (nothing lost) writes a
// violation file that is not empty: the holders of the id around the
// stale delivery, and the deliveries around it.
func TestDescribe_StaleDelivery(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 22, 22, 0, 0, time.UTC)
	var h history.History
	for seq := uint64(1); seq <= 3; seq++ {
		h.Sends = append(h.Sends, history.Send{ID: "mb-6", Key: fmt.Sprint("k", seq), Outcome: history.Posted, Seq: seq, Invoked: t0, Returned: t0})
	}
	h.Deliveries = []history.Delivery{
		{ID: "mb-6", Key: "k1", Seq: 1, Node: "owner-1", Epoch: 17, Revision: 5, At: t0.Add(time.Second)},
		{ID: "mb-6", Key: "k2", Seq: 2, Node: "owner-0", Epoch: 18, Revision: 9, At: t0.Add(2 * time.Second)},
		{ID: "mb-6", Key: "k3", Seq: 3, Node: "owner-0", Epoch: 18, Revision: 9, At: t0.Add(3 * time.Second)},
		{ID: "mb-6", Key: "k2", Seq: 2, Node: "owner-1", Epoch: 17, Revision: 5, At: t0.Add(4 * time.Second)}, // stale
	}
	rep := history.Check(h)
	if rep.StaleDeliveries != 1 || rep.Lost != 0 {
		t.Fatalf("want one stale delivery and nothing lost: %s", rep)
	}
	sc := scenario{Name: "stale"}
	res := outcome{Report: rep} // as run makes it
	res.StaleOthers, res.StaleExamples, res.SeizedStale, res.PausedStale = staleApart(h, rep, nil, nil, 0, history.Check)
	describes(t, describe(h, failures(sc, res), 0),
		"HOLDERS of mb-6 (first stale delivery seq 2)",
		"owner-1/17: 2 deliveries, first 1 at 22:22:01.000, last 2 at 22:22:04.000; last before the stale delivery 1 at 22:22:01.000, first after -",
		"VIOLATION stale delivery: mb-6 seq 2 to owner-1/17",
		"  delivery seq 2 key k2 owner-1/17 rev 5 at 2026-12-02T22:22:04Z",
	)
	// Beyond the clock bounds a stale delivery is no failure: nothing to log.
	sc.BeyondBounds = true
	if vs := failures(sc, res); len(vs) != 0 {
		t.Errorf("beyond the bounds, failures %v", vs)
	}
}
