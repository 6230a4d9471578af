package verify

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/testkit/history"
)

// The checks of calls and timers (calls.go, timers.go), beside those of
// every post: a call is a send of the history, and a timer that entered
// its mailbox is one from then on (withTimerSends), so lost, unexpected,
// order (per caller) and the stale checks apply to both.

// DeadLetter is a message the world moved to an id's dead letters: its
// id and its sequence when it was in the mailbox.
type DeadLetter struct {
	ID  string `json:"id"`
	Seq uint64 `json:"seq"`
}

// withTimerSends returns rec with a send of each timer added to its
// history (rec itself is not changed): one that entered its mailbox is
// posted at the sequence it entered first at (refused if its send was);
// one that must fire and did not is posted and lost; one that may have
// fired (its send or cancel of unknown outcome) is unknown. Each timer is
// a producer of its own (timer:<key>): timers are set in one order and
// fire in another, and their order is checked by timer_order.
func withTimerSends(rec *Recorded) *Recorded {
	if len(rec.Timers) == 0 {
		return rec
	}
	first := map[string]uint64{}
	for _, d := range rec.History.Deliveries {
		if s, ok := first[d.Key]; !ok || d.Seq < s {
			first[d.Key] = d.Seq
		}
	}
	out := *rec
	out.History.Sends = slices.Clone(rec.History.Sends)
	for _, t := range rec.Timers {
		s := history.Send{Producer: "timer:" + t.Key, ID: t.ID, Key: t.Key, Invoked: t.Invoked, Returned: t.Returned}
		seq, fired := first[t.Key]
		switch {
		case t.Outcome == TimerRefused:
			s.Outcome = history.Refused
		case fired:
			s.Outcome, s.Seq = history.Posted, seq
		case t.mustFire():
			s.Outcome = history.Posted
		case t.Outcome == TimerUnknown || t.Cancel == CancelUnknown:
			s.Outcome = history.Unknown
		default:
			continue // cancelled
		}
		out.History.Sends = append(out.History.Sends, s)
	}
	return &out
}

// ctVerdict is the verdict on calls and timers: their invariants, after
// those of every post.
type ctVerdict struct {
	invariants []Invariant
	examples   []string
	reasons    []string
	figures    map[string]any
}

const maxCTExamples = 20

func (v *ctVerdict) example(format string, args ...any) {
	if len(v.examples) < maxCTExamples {
		v.examples = append(v.examples, fmt.Sprintf(format, args...))
	}
}

// checkCallsTimers checks the calls and timers of rec:
//
//   - call_answers: a replied call's answer is the one a handler call of
//     that message gave (its key, sequence, node, epoch and entry time
//     match a delivery the owners reported);
//   - call_uncommitted: an answer came only after a commit covering the
//     call was stored: one at or below the bucket stream's last sequence
//     read after the answer came (a sharded world's shard cursor with its
//     exceptions). When the bucket's reader skipped writes, a call with
//     none there but one later is not judged (its commit may be a skipped
//     one);
//   - call_failed: a call answered failed is in its id's dead letters;
//   - timer_early: a timer entered its mailbox at or after its time, by
//     the mailbox stream's timestamp (the broker's clock, the time the
//     broker was given);
//   - timer_twice: it entered its mailbox once (one sequence);
//   - timer_cancelled: a timer removed by a cancel that returned before
//     its time never entered its mailbox;
//   - timer_order: from when it entered, it is in order with its id's
//     messages: its first delivery is not before that of the message of
//     its id stored just before it, nor after that of the one stored just
//     after it.
func checkCallsTimers(rec *Recorded) ctVerdict {
	var v ctVerdict
	byKey := map[string][]history.Delivery{}
	for _, d := range rec.History.Deliveries {
		byKey[d.Key] = append(byKey[d.Key], d)
	}
	v.figures = v.checkCalls(rec, byKey)
	maps.Copy(v.figures, v.checkTimers(rec, byKey))
	return v
}

func (v *ctVerdict) checkCalls(rec *Recorded, byKey map[string][]history.Delivery) map[string]any {
	n := rec.Meta.Shards
	units := unitCommits(rec.History.Commits)
	covers := func(c CallRecord, cm history.Commit) bool {
		if n == 0 {
			return cm.Cursor >= c.Seq
		}
		return wire.ShardCursor{Seq: cm.Cursor, Pending: rec.Pending[cm.StreamSeq]}.Committed(wire.EncodeID(c.ID), c.Seq)
	}
	dead := map[uint64]bool{}
	for _, d := range rec.Dead {
		dead[d.Seq] = true
	}
	count := map[string]int{}
	var badAnswer, uncommitted, unchecked, badFailed, unjudged int
	for _, c := range rec.Calls {
		count[c.Outcome]++
		if c.Outcome != CallReplied && c.Outcome != CallFailed {
			continue
		}
		if c.Outcome == CallReplied && !answeredByHandler(c, byKey[c.Key]) {
			badAnswer++
			v.example("call answer: %s key %q seq %d answered %q: no handler call of that message gave it", c.ID, c.Key, c.Seq, c.Answer)
		}
		if c.Outcome == CallFailed {
			switch {
			case !rec.Meta.DeadRead:
				unjudged++
			case !dead[c.Seq]:
				badFailed++
				v.example("call failed: %s key %q seq %d answered failed (%q) but is not in the dead letters", c.ID, c.Key, c.Seq, c.Answer)
			}
		}
		if c.BucketSeq == 0 {
			unchecked++
			continue
		}
		var before, after *history.Commit
		u := units[unitOf(c.ID, n)]
		// The first write whose mark reaches the call, then on to the
		// first that covers it (a shard cursor's exception may not).
		i, _ := slices.BinarySearch(u.maxMark, c.Seq)
		for ; i < len(u.cs); i++ {
			if !covers(c, u.cs[i]) {
				continue
			}
			if u.cs[i].StreamSeq <= c.BucketSeq {
				before = &u.cs[i]
			} else {
				after = &u.cs[i]
			}
			break
		}
		switch {
		case before != nil:
		case after != nil && rec.Coverage.Skipped > 0:
			unchecked++
		default:
			uncommitted++
			later := "none"
			if after != nil {
				later = fmt.Sprintf("bucket seq %d (%s/%d)", after.StreamSeq, after.Node, after.Epoch)
			}
			v.example("call answered before its commit: %s key %q seq %d answered %s; no commit covering it was stored at or below bucket seq %d, the stream's last after the answer came (the first covering it: %s)",
				c.ID, c.Key, c.Seq, c.Outcome, c.BucketSeq, later)
		}
	}
	answered := count[CallReplied] + count[CallFailed]
	v.invariants = append(v.invariants,
		Invariant{Name: "call_answers", Count: badAnswer, Of: count[CallReplied], Unit: "replies", What: "answers no handler call of that message gave"},
		Invariant{Name: "call_uncommitted", Count: uncommitted, Of: answered - unchecked, Unit: "answers", What: "came before a commit covering the call was stored"},
		Invariant{Name: "call_failed", Count: badFailed, Of: len(rec.Calls), Unit: "calls", What: "answered failed but never dead-lettered"},
	)
	if len(rec.Calls) > 0 && answered == 0 {
		v.reasons = append(v.reasons, "no call was answered: the answers were not checked")
	}
	if unjudged > 0 {
		v.reasons = append(v.reasons, fmt.Sprintf("the dead letters were not read: %d call(s) answered failed not checked", unjudged))
	}
	return map[string]any{
		"calls": len(rec.Calls), "calls_replied": count[CallReplied], "calls_failed": count[CallFailed], "calls_timeout": count[CallTimeout],
		"calls_unknown": count[CallUnknown], "calls_refused": count[CallRefused], "call_answers_unchecked": unchecked,
	}
}

// commitsOf are the commits of one unit (an id, or a shard's unit) in
// bucket order, and the highest cursor (mark) of each prefix.
type commitsOf struct {
	cs      []history.Commit
	maxMark []uint64 // maxMark[i]: the highest Cursor of cs[:i+1]
}

func unitCommits(all []history.Commit) map[string]commitsOf {
	byUnit := map[string][]history.Commit{}
	for _, c := range all {
		byUnit[c.ID] = append(byUnit[c.ID], c)
	}
	out := make(map[string]commitsOf, len(byUnit))
	for id, cs := range byUnit {
		slices.SortFunc(cs, func(a, b history.Commit) int { return cmp.Compare(a.StreamSeq, b.StreamSeq) })
		u := commitsOf{cs: cs, maxMark: make([]uint64, len(cs))}
		var m uint64
		for i, c := range cs {
			m = max(m, c.Cursor)
			u.maxMark[i] = m
		}
		out[id] = u
	}
	return out
}

// answeredByHandler says whether c's answer is one a handler call of its
// message gave (answerFor), among ds, the deliveries of its key.
func answeredByHandler(c CallRecord, ds []history.Delivery) bool {
	a, ok := parseAnswer(c.Answer)
	if !ok || a.key != c.Key || a.seq != c.Seq {
		return false
	}
	for _, d := range ds {
		if d.ID == c.ID && d.Seq == a.seq && d.Node == a.node && d.Epoch == a.epoch && d.At.UnixNano() == a.at {
			return true
		}
	}
	return false
}

func (v *ctVerdict) checkTimers(rec *Recorded, byKey map[string][]history.Delivery) map[string]any {
	// The first delivery of each message, per id: timer_order.
	firstAt := map[string]map[uint64]time.Time{}
	for _, d := range rec.History.Deliveries {
		m := firstAt[d.ID]
		if m == nil {
			m = map[uint64]time.Time{}
			firstAt[d.ID] = m
		}
		if t, ok := m[d.Seq]; !ok || d.At.Before(t) {
			m[d.Seq] = d.At
		}
	}
	sorted := map[string][]uint64{}
	seqsOf := func(id string) []uint64 {
		s, ok := sorted[id]
		if !ok {
			for seq := range firstAt[id] {
				s = append(s, seq)
			}
			slices.Sort(s)
			sorted[id] = s
		}
		return s
	}
	var scheduled, fired, stamped, early, twice, inTime, cancelledFired, order, unknown, refused int
	var late []time.Duration
	for _, t := range rec.Timers {
		switch t.Outcome {
		case TimerScheduled:
			scheduled++
		case TimerUnknown:
			unknown++
		case TimerRefused:
			refused++
		}
		ds := byKey[t.Key]
		if t.cancelledInTime() {
			inTime++
			if len(ds) > 0 {
				cancelledFired++
				v.example("timer cancelled fired: %s key %q (due %s) cancelled at %s, yet delivered as seq %d at %s",
					t.ID, t.Key, t.At.Format(time.RFC3339Nano), t.CancelReturned.Format(time.RFC3339Nano), ds[0].Seq, ds[0].At.Format(time.RFC3339Nano))
			}
		}
		if len(ds) == 0 {
			continue
		}
		fired++
		var seqs []uint64
		for _, d := range ds {
			if !slices.Contains(seqs, d.Seq) {
				seqs = append(seqs, d.Seq)
			}
		}
		slices.Sort(seqs)
		if len(seqs) > 1 {
			twice++
			v.example("timer twice: %s key %q entered its mailbox %d times, at seqs %v", t.ID, t.Key, len(seqs), seqs)
		}
		if st, ok := rec.Stored[seqs[0]]; ok {
			stamped++
			late = append(late, st.Sub(t.At))
		}
		for _, seq := range seqs {
			if st, ok := rec.Stored[seq]; ok && st.Before(t.At) {
				early++
				v.example("timer early: %s key %q due %s entered its mailbox as seq %d at %s, %v before its time",
					t.ID, t.Key, t.At.Format(time.RFC3339Nano), seq, st.Format(time.RFC3339Nano), t.At.Sub(st))
				break
			}
		}
		if msg, bad := outOfOrder(ds[0].ID, seqs[0], firstAt[ds[0].ID], seqsOf(ds[0].ID)); bad {
			order++
			v.example("timer order: %s key %q (seq %d) %s", t.ID, t.Key, seqs[0], msg)
		}
	}
	v.invariants = append(v.invariants,
		Invariant{Name: "timer_early", Count: early, Of: stamped, Unit: "timers fired", What: "entered the mailbox before their time (the mailbox stream's timestamp)"},
		Invariant{Name: "timer_twice", Count: twice, Of: fired, Unit: "timers fired", What: "entered the mailbox more than once"},
		Invariant{Name: "timer_cancelled", Count: cancelledFired, Of: inTime, Unit: "cancelled", What: "entered the mailbox though cancelled before their time"},
		Invariant{Name: "timer_order", Count: order, Of: fired, Unit: "timers fired", What: "first delivered out of order with their id's messages stored before or after"},
	)
	if scheduled > 0 && fired == 0 {
		v.reasons = append(v.reasons, "no timer scheduled fired: the timers were not checked")
	}
	figs := map[string]any{"timers": len(rec.Timers), "timers_fired": fired, "timers_cancelled": inTime, "timers_unknown": unknown, "timers_refused": refused}
	if len(late) > 0 {
		slices.Sort(late)
		figs["timer_late_p50_ms"] = late[len(late)/2].Milliseconds()
		figs["timer_late_max_ms"] = late[len(late)-1].Milliseconds()
	}
	return figs
}

// outOfOrder says whether the message at seq of an id (first delivered at
// first[seq]; seqs: the id's delivered sequences, sorted) was first
// delivered before the message stored just before it, or after the one
// stored just after it; and how.
func outOfOrder(id string, seq uint64, first map[uint64]time.Time, seqs []uint64) (string, bool) {
	i, ok := slices.BinarySearch(seqs, seq)
	if !ok {
		return "", false
	}
	at := first[seq]
	if i > 0 && at.Before(first[seqs[i-1]]) {
		return fmt.Sprintf("first delivered at %s, before %s seq %d stored before it (first delivered at %s)",
			at.Format(time.RFC3339Nano), id, seqs[i-1], first[seqs[i-1]].Format(time.RFC3339Nano)), true
	}
	if i+1 < len(seqs) && first[seqs[i+1]].Before(at) {
		return fmt.Sprintf("first delivered at %s, after %s seq %d stored after it (first delivered at %s)",
			at.Format(time.RFC3339Nano), id, seqs[i+1], first[seqs[i+1]].Format(time.RFC3339Nano)), true
	}
	return "", false
}
