package verify

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/testkit/history"
)

// withCallsTimers is sound() with a call and three timers of v-0, all
// kept: c0-1 (seq 4) handled by b/2, committed at bucket seq 11 and
// answered after it; timer t-1 (seq 5) entering the mailbox 120 ms after
// its time, handled and committed; t-2 cancelled 2 s before its time and
// never delivered; t-3 whose send's outcome was unknown, never delivered.
func withCallsTimers() *Recorded {
	rec := sound()
	t0 := rec.History.Deliveries[0].At.Add(-10 * time.Millisecond)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	h := &rec.History
	h.Sends = append(h.Sends, history.Send{Producer: "c0", ID: "v-0", Key: "c0-1", Outcome: history.Posted, Seq: 4, Invoked: at(36), Returned: at(47)})
	call := history.Delivery{ID: "v-0", Key: "c0-1", Seq: 4, Node: "b", Epoch: 2, Revision: 8, At: at(40)}
	timer := history.Delivery{ID: "v-0", Key: "t-1", Seq: 5, Node: "b", Epoch: 2, Revision: 8, At: at(50)}
	h.Deliveries = append(h.Deliveries, call, timer)
	h.Commits = append(h.Commits,
		history.Commit{ID: "v-0", Node: "b", Epoch: 2, Revision: 8, Cursor: 4, StreamSeq: 11, At: at(45)},
		history.Commit{ID: "v-0", Node: "b", Epoch: 2, Revision: 8, Cursor: 5, StreamSeq: 12, At: at(55)})
	rec.Calls = []CallRecord{{Caller: "c0", ID: "v-0", Key: "c0-1", Outcome: CallReplied, Seq: 4,
		Answer: fmt.Sprintf("c0-1 4 b 2 %d", call.At.UnixNano()), Invoked: at(36), Returned: at(47), BucketSeq: 11}}
	rec.Timers = []TimerRecord{
		{ID: "v-0", Key: "t-1", At: at(-100), Outcome: TimerScheduled, Invoked: at(-900), Returned: at(-899)},
		{ID: "v-0", Key: "t-2", At: at(3000), Outcome: TimerScheduled, Invoked: at(0), Returned: at(1),
			Cancel: CancelRemoved, CancelInvoked: at(400), CancelReturned: at(401)},
		{ID: "v-0", Key: "t-3", At: at(200), Outcome: TimerUnknown, Invoked: at(0), Returned: at(3000)},
	}
	rec.Stored = map[uint64]time.Time{5: at(20)} // 120 ms after t-1's time
	rec.Meta.DeadRead = true
	return rec
}

// checkRoundTrip checks rec and the same history written and read back,
// and says that both verdicts are the same.
func checkRoundTrip(t *testing.T, rec *Recorded) Verdict {
	t.Helper()
	v := Check(rec)
	var buf bytes.Buffer
	require.NoError(t, WriteHistory(&buf, rec))
	back, err := ReadHistory(&buf)
	require.NoError(t, err)
	w := Check(back)
	require.Equal(t, counts(v), counts(w), "the verdict changed through the file")
	require.Equal(t, v.Outcome, w.Outcome)
	return v
}

// TestCheck_CallsTimers: the checks of calls and timers. A sound history
// with a call and timers passes, each new invariant with what it checked;
// each break is caught under its own invariant, and survives the history
// file: an answer that came before the commit covering its call, one no
// handler call gave, a failed answer without a dead letter, a timer that
// entered its mailbox before its time (the stored timestamp), twice, or
// out of order with its id's messages, a cancelled timer that fired, and
// a scheduled timer that never did (lost).
func TestCheck_CallsTimers(t *testing.T) {
	v := checkRoundTrip(t, withCallsTimers())
	require.Equal(t, Passed, v.Outcome, "%+v", v)
	of := map[string]int{}
	for _, inv := range v.Invariants {
		of[inv.Name] = inv.Of
	}
	require.Equal(t, map[string]int{"call_answers": 1, "call_uncommitted": 1, "call_failed": 1, "timer_early": 1, "timer_twice": 1, "timer_cancelled": 1, "timer_order": 1},
		map[string]int{"call_answers": of["call_answers"], "call_uncommitted": of["call_uncommitted"], "call_failed": of["call_failed"],
			"timer_early": of["timer_early"], "timer_twice": of["timer_twice"], "timer_cancelled": of["timer_cancelled"], "timer_order": of["timer_order"]})
	require.Equal(t, 5, of["lost"], "3 sends, the call, the timer fired")
	require.EqualValues(t, 120, v.Figures["timer_late_max_ms"])

	for _, c := range []struct {
		name    string
		break_  func(rec *Recorded)
		counts  map[string]int
		example string
	}{
		{"answer before its commit", func(rec *Recorded) { rec.Calls[0].BucketSeq = 10 },
			map[string]int{"call_uncommitted": 1}, `call answered before its commit: v-0 key "c0-1" seq 4 answered replied; no commit covering it was stored at or below bucket seq 10`},
		{"answer of another handler call", func(rec *Recorded) { rec.Calls[0].Answer = strings.Replace(rec.Calls[0].Answer, " b 2 ", " b 3 ", 1) },
			map[string]int{"call_answers": 1}, `call answer: v-0 key "c0-1" seq 4 answered`},
		{"failed, not dead-lettered", func(rec *Recorded) { rec.Calls[0].Outcome, rec.Calls[0].Answer = CallFailed, "boom" },
			map[string]int{"call_failed": 1}, `call failed: v-0 key "c0-1" seq 4 answered failed ("boom")`},
		{"timer early", func(rec *Recorded) { rec.Stored[5] = rec.Timers[0].At.Add(-time.Millisecond) },
			map[string]int{"timer_early": 1}, `timer early: v-0 key "t-1" due`},
		{"timer twice", func(rec *Recorded) {
			d := rec.History.Deliveries[4]
			d.Seq, d.At = 6, d.At.Add(10*time.Millisecond)
			rec.History.Deliveries = append(rec.History.Deliveries, d)
		}, map[string]int{"timer_twice": 1}, `timer twice: v-0 key "t-1" entered its mailbox 2 times, at seqs [5 6]`},
		{"timer out of order", func(rec *Recorded) {
			rec.History.Deliveries[4].At = rec.History.Deliveries[3].At.Add(-time.Millisecond)
		},
			map[string]int{"timer_order": 1}, `timer order: v-0 key "t-1" (seq 5) first delivered at`},
		{"cancelled timer fired", func(rec *Recorded) {
			rec.History.Deliveries = append(rec.History.Deliveries, history.Delivery{ID: "v-0", Key: "t-2", Seq: 6, Node: "b", Epoch: 2, Revision: 8,
				At: rec.Timers[1].At.Add(10 * time.Millisecond)})
			rec.Stored[6] = rec.Timers[1].At
		}, map[string]int{"timer_cancelled": 1}, `timer cancelled fired: v-0 key "t-2"`},
		{"scheduled timer never fired", func(rec *Recorded) { rec.Timers[2].Outcome = TimerScheduled },
			map[string]int{"lost": 1}, `lost: v-0 key "t-3" posted at seq 0 by timer:t-3, never delivered`},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := withCallsTimers()
			c.break_(rec)
			v := checkRoundTrip(t, rec)
			require.Equal(t, Violated, v.Outcome, "%+v", v)
			for name, n := range counts(v) {
				require.Equal(t, c.counts[name], n, "%s: %s", name, strings.Join(v.Examples, "\n"))
			}
			require.Contains(t, strings.Join(v.Examples, "\n"), c.example)
		})
	}

	t.Run("failed and dead-lettered", func(t *testing.T) {
		rec := withCallsTimers()
		rec.Calls[0].Outcome, rec.Calls[0].Answer = CallFailed, "boom"
		rec.Dead = []DeadLetter{{ID: "v-0", Seq: 4}}
		require.Equal(t, Passed, checkRoundTrip(t, rec).Outcome)
		rec.Meta.DeadRead = false
		v := checkRoundTrip(t, rec)
		require.Equal(t, Inconclusive, v.Outcome)
		require.Contains(t, v.Reasons, "the dead letters were not read: 1 call(s) answered failed not checked")
	})

	t.Run("timed out, then handled; or never", func(t *testing.T) {
		rec := withCallsTimers()
		rec.Calls[0].Outcome, rec.Calls[0].Answer, rec.Calls[0].BucketSeq = CallTimeout, "", 0
		v := checkRoundTrip(t, rec)
		require.Equal(t, Inconclusive, v.Outcome, "a run with calls and no reply is not a pass")
		require.Zero(t, counts(v)["lost"])
		rec.History.Deliveries = append(rec.History.Deliveries[:3], rec.History.Deliveries[4])
		v = checkRoundTrip(t, rec)
		require.Equal(t, 1, counts(v)["lost"], "a call that timed out is never lost")
	})
}

// TestCheck_CallsSharded: on a sharded world an answer needs a shard
// cursor write that covers its call, its exceptions included, at or below
// the bucket sequence read after the answer came.
func TestCheck_CallsSharded(t *testing.T) {
	rec, a, _, _ := shardHistory(t, nil)
	d := rec.History.Deliveries[2] // a's k3, seq 3, delivered to n2/2, covered by the write at bucket seq 9
	rec.Calls = []CallRecord{{Caller: "p0", ID: a, Key: "k3", Outcome: CallReplied, Seq: 3,
		Answer: fmt.Sprintf("k3 3 n2 2 %d", d.At.UnixNano()), BucketSeq: 9}}
	rec.Meta.DeadRead = true
	require.Equal(t, Passed, checkRoundTrip(t, rec).Outcome)

	rec.Calls[0].BucketSeq = 8
	v := checkRoundTrip(t, rec)
	require.Equal(t, 1, counts(v)["call_uncommitted"], "%v", v.Examples)

	// The write at 9 excepts a from seq 3: it does not cover the call.
	rec.Calls[0].BucketSeq = 9
	rec.Pending = map[uint64]map[string]wire.PendingID{9: {wire.EncodeID(a): {Seq: 3, Failures: 1, Error: "x"}}}
	v = Check(rec)
	require.Equal(t, 1, counts(v)["call_uncommitted"], "%v", v.Examples)
}
