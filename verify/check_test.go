package verify

import (
	"bytes"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/testkit/history"
)

// sound is a small history that keeps every invariant: three messages of
// one producer, delivered to a/1 and, after a takeover, to b/2, with the
// commits of each.
func sound() *Recorded {
	t0 := time.Date(2026, 12, 1, 5, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	rec := history.NewRecorder()
	for i, k := range []string{"k1", "k2", "k3"} {
		rec.SendDone(rec.SendInvoked("p0", "v-0", k), history.Posted, uint64(i+1))
	}
	rec.Deliver(history.Delivery{ID: "v-0", Key: "k1", Seq: 1, Node: "a", Epoch: 1, Revision: 5, At: at(10)})
	rec.Deliver(history.Delivery{ID: "v-0", Key: "k2", Seq: 2, Node: "a", Epoch: 1, Revision: 5, At: at(20)})
	rec.Deliver(history.Delivery{ID: "v-0", Key: "k3", Seq: 3, Node: "b", Epoch: 2, Revision: 8, At: at(30)})
	h := rec.History()
	h.Commits = []history.Commit{
		{ID: "v-0", Node: "a", Epoch: 1, Revision: 5, Cursor: 2, StreamSeq: 7, At: at(25)},
		{ID: "v-0", Node: "b", Epoch: 2, Revision: 8, Cursor: 3, StreamSeq: 9, At: at(35)},
	}
	return &Recorded{Meta: Meta{World: "verify-test", Drained: true, FollowerCurrent: true}, History: h}
}

func counts(v Verdict) map[string]int {
	m := map[string]int{}
	for _, inv := range v.Invariants {
		m[inv.Name] = inv.Count
		if inv.OK != (inv.Count == 0) {
			panic(inv.Name)
		}
	}
	return m
}

// TestCheck_BrokenHistory: a history with a lost message, a stale commit
// and an unfenced cursor write is violated, each counted once under its
// invariant; the same history unbroken passes; both survive the history
// file (WriteHistory, ReadHistory) unchanged.
func TestCheck_BrokenHistory(t *testing.T) {
	good := sound()
	v := Check(good)
	require.Equal(t, Passed, v.Outcome, "%+v", v)

	bad := sound()
	h := &bad.History
	h.Deliveries = append(h.Deliveries[:1], h.Deliveries[2:]...) // k2 never delivered
	h.Commits = append(h.Commits, history.Commit{ID: "v-0", Node: "a", Epoch: 1, Revision: 5, Cursor: 3, StreamSeq: 10, At: h.Commits[1].At.Add(time.Millisecond)})
	bad.Unfenced = []CursorWrite{{ID: "v-0", Seq: 11, Cursor: 3}}
	v = Check(bad)
	require.Equal(t, Violated, v.Outcome)
	require.Equal(t, map[string]int{"lost": 1, "unexpected": 0, "order": 0, "stale_deliveries": 0, "stale_commits": 1,
		"unfenced_commits": 1, "cursor_back": 0, "linearizable": 0, "call_answers": 0, "call_uncommitted": 0, "call_failed": 0,
		"timer_early": 0, "timer_twice": 0, "timer_cancelled": 0, "timer_order": 0}, counts(v))
	require.NotEmpty(t, v.Examples)

	for _, rec := range []*Recorded{good, bad} {
		var buf bytes.Buffer
		require.NoError(t, WriteHistory(&buf, rec))
		back, err := ReadHistory(&buf)
		require.NoError(t, err)
		require.Equal(t, counts(Check(rec)), counts(Check(back)))
		require.Equal(t, Check(rec).Outcome, Check(back).Outcome)
		require.Equal(t, rec.Meta.World, back.Meta.World)
	}
}

// TestCheck_Inconclusive: a run whose final drain did not finish is not a
// pass, even with no violation.
func TestCheck_Inconclusive(t *testing.T) {
	rec := sound()
	rec.Meta.Drained = false
	v := Check(rec)
	require.Equal(t, Inconclusive, v.Outcome)
	require.Len(t, v.Reasons, 1)
}

func TestReadHistory_Refuses(t *testing.T) {
	for _, in := range []string{"not json\n", `{"t":"what"}` + "\n", `{"t":"send","outcome":"maybe"}` + "\n", `{"t":"op","kind":"claim","result":"won"}` + "\n"} {
		_, err := ReadHistory(bytes.NewBufferString(in))
		require.Error(t, err, in)
		require.Contains(t, err.Error(), "history line 1")
	}
}

func TestConfig_Validate(t *testing.T) {
	owner := func() *exec.Cmd { return exec.Command("true") }
	conn := Conn{URL: "nats://127.0.0.1:4222"}
	require.NoError(t, Config{Conn: conn, OwnerCommand: owner}.Validate())
	for want, c := range map[string]Config{
		"no owner command":             {Conn: conn},
		"no server URL":                {OwnerCommand: owner},
		"duration 1s":                  {Conn: conn, OwnerCommand: owner, Duration: time.Second},
		"ids 1001":                     {Conn: conn, OwnerCommand: owner, IDs: MaxIDs + 1},
		"replicas 2":                   {Conn: conn, OwnerCommand: owner, Replicas: 2},
		"owners 1":                     {Conn: conn, OwnerCommand: owner, Owners: 1},
		"ttl 100ms":                    {Conn: conn, OwnerCommand: owner, TTL: 100 * time.Millisecond},
		`fault "explode"`:              {Conn: conn, OwnerCommand: owner, Faults: []string{"explode"}},
		"nats:// and tls:// URLs only": {Conn: Conn{URL: "ws://127.0.0.1:8080"}, OwnerCommand: owner, Faults: []string{FaultCut}},
	} {
		err := c.Validate()
		require.ErrorIs(t, err, ErrInvalidConfig, want)
		require.Contains(t, err.Error(), want)
	}
	// Without the cut fault a websocket URL is fine.
	require.NoError(t, Config{Conn: Conn{URL: "ws://127.0.0.1:8080"}, OwnerCommand: owner, Faults: []string{FaultKill}}.Validate())

	_, err := ParseFaults("kill,nope")
	require.ErrorIs(t, err, ErrInvalidConfig)
	f, err := ParseFaults("stop, kill,stop")
	require.NoError(t, err)
	require.Equal(t, []string{"stop", "kill"}, f)
	f, err = ParseFaults("none")
	require.NoError(t, err)
	require.NotNil(t, f)
	require.Empty(t, f)
}
