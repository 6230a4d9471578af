package verify

import (
	"fmt"
	"maps"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/fencepost/fencepost/testkit/history"
)

// Outcomes of a run.
const (
	Passed       = "passed"       // every invariant held
	Violated     = "violated"     // at least one invariant was violated
	Inconclusive = "inconclusive" // none was violated, but the run could not check everything
)

// Invariant is the verdict on one invariant.
type Invariant struct {
	Name  string `json:"name"`
	OK    bool   `json:"ok"`
	Count int    `json:"count"` // violations
	Of    int    `json:"of"`    // how many were checked
	Unit  string `json:"unit"`  // what Of counts
	What  string `json:"what"`  // what Count counts: the violation
}

// Verdict is the outcome of Check.
type Verdict struct {
	Outcome    string         `json:"outcome"`
	Invariants []Invariant    `json:"invariants"`
	Report     history.Report `json:"-"`
	Lin        string         `json:"linearizable"` // porcupine's result: Ok, Illegal, Unknown
	Reasons    []string       `json:"reasons,omitempty"`
	Examples   []string       `json:"examples,omitempty"`
	Figures    map[string]any `json:"figures"`
	Faults     map[string]int `json:"faults"`
}

// LinTimeout bounds the linearizability search of Check.
const LinTimeout = 2 * time.Minute

// Check checks a recorded history: testkit/history's checks of
// deliveries and commits, the fence on every cursor write read from the
// bucket stream, and the linearizability of the ownership operations. A
// sharded world's run is checked per shard where ownership is the
// shard's (shards.go). Calls and timers are checked as posts and by
// their own invariants (checkct.go), after the others.
func Check(rec *Recorded) Verdict {
	rec = withTimerSends(rec) // a timer that fired is a post from then on (checkct.go)
	h := rec.History
	rep := history.Check(h)
	if rec.Meta.Shards > 0 {
		rep = shardReport(rec, rep)
	}
	lin := history.CheckOwnership(h.Ops, LinTimeout)
	v := Verdict{Report: rep, Lin: string(lin.Result), Faults: map[string]int{}, Reasons: []string{}, Examples: []string{}}
	writes := rep.Commits + len(rec.Unfenced)
	linBad := 0
	if lin.Result == porcupine.Illegal {
		linBad = 1
	}
	v.Invariants = []Invariant{
		{Name: "lost", Count: rep.Lost, Of: rep.Posted, Unit: "posted", What: "acknowledged sends never delivered"},
		{Name: "unexpected", Count: rep.Unexpected, Of: rep.Deliveries, Unit: "deliveries", What: "deliveries of messages never posted or refused"},
		{Name: "order", Count: rep.Order, Of: rep.Posted, Unit: "posted", What: "first delivered before a message its producer posted earlier"},
		{Name: "stale_deliveries", Count: rep.StaleDeliveries, Of: rep.Deliveries, Unit: "deliveries", What: "handed to an epoch after a newer one had acted"},
		{Name: "stale_commits", Count: rep.StaleCommits, Of: rep.Commits, Unit: "commits", What: "stored after the record had named a newer epoch"},
		{Name: "unfenced_commits", Count: len(rec.Unfenced), Of: writes, Unit: "cursor writes", What: "stored without the fence of their id's record"},
		{Name: "cursor_back", Count: rep.CursorBack, Of: rep.Commits, Unit: "commits", What: "moved an id's cursor back"},
		{Name: "linearizable", Count: linBad, Of: lin.Ops, Unit: "ownership ops", What: "not linearizable against the record's model (porcupine)"},
	}
	ct := checkCallsTimers(rec)
	v.Invariants = append(v.Invariants, ct.invariants...)
	bad := false
	for i := range v.Invariants {
		v.Invariants[i].OK = v.Invariants[i].Count == 0
		bad = bad || v.Invariants[i].Count > 0
	}
	for _, u := range rec.Unfenced[:min(len(rec.Unfenced), 5)] {
		v.Examples = append(v.Examples, fmt.Sprintf("unfenced commit: %s cursor %d at bucket seq %d (fence revision %d on %q)", u.ID, u.Cursor, u.Seq, u.Revision, u.Subject))
	}
	v.Examples = append(v.Examples, rep.Examples...)
	v.Examples = append(v.Examples, ct.examples...)
	if linBad > 0 {
		v.Examples = append(v.Examples, "not linearizable: "+history.Explain(h.Ops, LinTimeout))
	}
	if !rec.Meta.Drained {
		v.Reasons = append(v.Reasons, "the final drain did not empty every mailbox in time: lost messages may only be late")
	}
	if lin.Result == porcupine.Unknown {
		v.Reasons = append(v.Reasons, "the linearizability search ran out of time")
	}
	if rep.Posted == 0 || rep.Deliveries == 0 {
		v.Reasons = append(v.Reasons, "nothing was posted or delivered")
	}
	if !rec.Meta.FollowerCurrent {
		v.Reasons = append(v.Reasons, "the bucket stream was not read to its end: commits may be missing")
	}
	v.Reasons = append(v.Reasons, ct.reasons...)
	switch {
	case bad:
		v.Outcome = Violated
	case len(v.Reasons) > 0:
		v.Outcome = Inconclusive
	default:
		v.Outcome = Passed
	}
	for _, f := range rec.FaultEvents {
		v.Faults[f.Kind]++
	}
	v.Figures = map[string]any{
		"sends": rep.Sends, "posted": rep.Posted, "refused": rep.Refused, "unknown": rep.Unknown,
		"deliveries": rep.Deliveries, "distinct": rep.Distinct, "duplicates": rep.Duplicates,
		"commits": rep.Commits, "takeovers": rep.Takeovers, "stored_twice": rep.StoredTwice,
		"ownership_ops": lin.Ops, "ownership_unknown": lin.Unknown,
		"bucket_read": rec.Coverage.Read, "bucket_skipped": rec.Coverage.Skipped,
		"commits_unattributed": rec.Coverage.Unattributed, "commits_from_owners": rec.Coverage.FromOwners,
		"owner_starts": rec.OwnerStarts, "unknown_send_attempts": rec.UnknownSends,
	}
	maps.Copy(v.Figures, ct.figures)
	return v
}
