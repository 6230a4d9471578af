package daemon

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/internal/wire"
)

// judgeRun drives the auditor's judgement of records as record does,
// without a server: each write judged against its key's mark, the mark
// moved on after an honest write or after fencepostd's free of a forged
// one (stored). A write the watch does not deliver (the bucket kept only
// a later write of the key) is skipped with unseen.
type judgeRun struct {
	t   *testing.T
	a   *auditor
	rev uint64
	at  time.Time
}

func newJudgeRun(t *testing.T) *judgeRun {
	a := &auditor{maxTTL: time.Minute, watch: 1, marks: &epochMarks{m: map[string]epochMark{}}}
	// The bucket was written 100 times before: enough for the first
	// epochs a run writes.
	return &judgeRun{t: t, a: a, rev: 100, at: time.Now()}
}

// unseen is a write of the bucket the watch never delivers.
func (r *judgeRun) unseen() { r.rev++ }

// write is a write of key delivered to the auditor: its verdict.
func (r *judgeRun) write(key string, rec wire.Record) recordVerdict {
	r.t.Helper()
	r.rev++
	b, err := wire.EncodeRecord(rec)
	require.NoError(r.t, err)
	e := &entry{key: key, value: b, rev: r.rev, created: r.at, op: jetstream.KeyValuePut}
	m := r.a.marks.m[key]
	v := r.a.judge(m, e, strings.HasPrefix(key, wire.NodePrefix), writer{}, false)
	if v.kind == "" {
		r.a.marks.m[key] = v.next
	} else {
		r.a.marks.m[key] = r.a.freed(m, e, v, true)
	}
	r.a.seen++
	return v
}

func (r *judgeRun) honest(key string, rec wire.Record) {
	r.t.Helper()
	v := r.write(key, rec)
	require.Empty(r.t, v.kind, "an honest write judged forged: %+v", rec)
}

func (r *judgeRun) forged(key string, rec wire.Record, kind string) recordVerdict {
	r.t.Helper()
	v := r.write(key, rec)
	require.Equal(r.t, kind, v.kind, "%+v", rec)
	return v
}

func (r *judgeRun) held(node string, epoch uint64) wire.Record {
	return wire.Record{Node: node, Epoch: epoch, State: wire.StateHeld, TTLms: 60_000, Acquired: r.at, Expires: r.at.Add(time.Minute)}
}

func (r *judgeRun) free(node string, epoch uint64) wire.Record {
	return wire.Record{Node: node, Epoch: epoch, State: wire.StateFree, TTLms: 60_000, Acquired: r.at, Expires: r.at}
}

// TestJudge_ForgedRightBehindAClaim is the sequence CI met on 7 Dec
// (TestAttack_EpochNeverGoesBack): fencepostd frees a forged record at
// epoch 2; node-b claims epoch 3, and node-a writes its own record at
// epoch 2 over it before the watch delivers the claim, which the bucket
// then no longer holds. The mark is still at 2, so epoch 2 is no step
// back from it; but epoch 2 had ended (freed), and no honest write holds
// an ended epoch again. Judged forged, and freed at or above the claim's
// epoch, so that the next claim's is above both.
func TestJudge_ForgedRightBehindAClaim(t *testing.T) {
	for _, freeDelivered := range []bool{true, false} {
		r := newJudgeRun(t)
		key := wire.RecordKey("victim")
		r.honest(key, r.held("node-b", 2))
		v := r.forged(key, r.held("node-a", 1), ForgedEpochBack)
		require.Equal(t, uint64(2), v.epoch)
		if freeDelivered {
			r.honest(key, r.free("node-a", 2)) // fencepostd's free
		} else {
			r.unseen()
		}
		r.unseen() // node-b's claim of epoch 3
		v = r.forged(key, r.held("node-a", 2), ForgedEpochBack)
		require.True(t, v.reheld)
		require.GreaterOrEqual(t, v.epoch, uint64(3), "freed below the epoch node-b's claim was given")
	}
}

// TestJudge_EndedEpochHeldAgain: after a record at epoch E is free, or
// held by one node, a held record at E is forged (free, or for another
// node), whatever the watch missed in between; the writes an honest owner
// makes pass, missed writes or not.
func TestJudge_EndedEpochHeldAgain(t *testing.T) {
	key := wire.RecordKey("id")
	t.Run("released, then held at the same epoch", func(t *testing.T) {
		r := newJudgeRun(t)
		r.honest(key, r.held("node-b", 5))
		r.honest(key, r.free("node-b", 5))
		v := r.forged(key, r.held("node-b", 5), ForgedEpochBack)
		require.True(t, v.reheld)
		require.GreaterOrEqual(t, v.epoch, uint64(5))
	})
	t.Run("held by another node at the same epoch", func(t *testing.T) {
		r := newJudgeRun(t)
		r.honest(key, r.held("node-b", 5))
		r.unseen()
		require.True(t, r.forged(key, r.held("node-a", 5), ForgedEpochBack).reheld)
	})
	t.Run("a node lease retired, then held at its epoch", func(t *testing.T) {
		r := newJudgeRun(t)
		nk := wire.NodeKey("node-a")
		r.honest(nk, r.held("node-a", 3))
		r.honest(nk, r.free("node-a", 3))
		require.True(t, r.forged(nk, r.held("node-a", 3), ForgedEpochBack).reheld)
	})
	t.Run("honest: renewals with writes missed between", func(t *testing.T) {
		r := newJudgeRun(t)
		r.honest(key, r.held("node-b", 5))
		r.unseen()
		r.honest(key, r.held("node-b", 5))
		r.unseen()
		r.unseen()
		r.honest(key, r.held("node-b", 5))
	})
	t.Run("honest: release, claim, seize, release, missed or not", func(t *testing.T) {
		r := newJudgeRun(t)
		r.honest(key, r.held("node-b", 5))
		r.honest(key, r.free("node-b", 5))
		r.honest(key, r.held("node-a", 6))
		r.unseen()
		r.honest(key, r.held("node-b", 8))
		r.honest(key, r.free("node-b", 8))
		r.unseen()
		r.honest(key, r.held("node-b", 10))
	})
	t.Run("a mark read back after a restart knows only the epoch", func(t *testing.T) {
		r := newJudgeRun(t)
		r.a.marks.m[key] = epochMark{Epoch: 5, Rev: r.rev}
		r.honest(key, r.held("node-a", 5)) // maybe a renew
		require.True(t, r.forged(key, r.held("node-b", 5), ForgedEpochBack).reheld)
	})
	t.Run("a free that was written over tells nothing of the record", func(t *testing.T) {
		r := newJudgeRun(t)
		r.honest(key, r.held("node-b", 5))
		m := r.a.marks.m[key]
		v := r.forged(key, r.held("node-a", 4), ForgedEpochBack)
		r.a.marks.m[key] = r.a.freed(m, &entry{key: key, rev: r.rev}, v, false)
		r.honest(key, r.held("node-a", 5)) // what wrote over the forged record: judged by epoch only
	})
}

// TestJudge_FreedMarkCountsOnlyWhatTheWatchMissed: a record freed above
// its mark (writes the watch missed came before the forgery) marks the
// free's epoch as this watch's own, so that a later forgery is freed
// above only the writes the watch did not deliver, not above every write
// of the bucket since (epochs may skip, but not by the bucket's traffic).
func TestJudge_FreedMarkCountsOnlyWhatTheWatchMissed(t *testing.T) {
	r := newJudgeRun(t)
	key := wire.RecordKey("id")
	r.honest(key, r.held("node-b", 2))
	r.unseen() // a write of the record the watch missed
	r.rev++
	e := &entry{key: key, rev: r.rev, created: r.at, op: jetstream.KeyValueDelete}
	m := r.a.marks.m[key]
	v := r.a.judge(m, e, false, writer{}, false)
	require.Equal(t, ForgedRecordGone, v.kind)
	require.Equal(t, uint64(3), v.epoch, "above the write the watch missed")
	r.a.marks.m[key] = r.a.freed(m, e, v, true)
	r.a.seen++
	r.unseen() // fencepostd's free, written over before the watch reached it
	for i := range 50 {
		r.honest(wire.RecordKey(fmt.Sprint("other-", i)), r.held("node-c", 1))
	}
	v = r.forged(key, r.held("node-a", 3), ForgedEpochBack)
	require.True(t, v.reheld)
	require.Equal(t, uint64(4), v.epoch, "freed above the one write the watch missed since, not the 50 it delivered")
}

// FuzzJudge: whatever bytes a record write carries, the judgement never
// lets an epoch go back: an honest verdict is a record that decodes, at
// or above the mark's epoch, and leaves a mark no lower; a forged one is
// freed at or above the mark's epoch; a held record at the mark's epoch
// after its end, or for another node, is never honest.
func FuzzJudge(f *testing.F) {
	at := time.Unix(1_800_000_000, 0)
	for _, rec := range []wire.Record{
		{Node: "node-a", Epoch: 3, State: wire.StateHeld, TTLms: 60_000, Acquired: at, Expires: at.Add(time.Minute)},
		{Node: "node-b", Epoch: 3, State: wire.StateFree, TTLms: 60_000, Acquired: at, Expires: at},
		{Node: "node-a", Epoch: 1 << 63, State: wire.StateHeld, TTLms: 60_000, Acquired: at, Expires: at.Add(time.Hour)},
	} {
		b, err := wire.EncodeRecord(rec)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, uint64(3), true, false, "node-b", uint64(2))
	}
	f.Add([]byte("not a record"), uint64(0), false, false, "", uint64(0))
	f.Add([]byte("not a record"), uint64(math.MaxUint64-1), false, false, "", uint64(5))
	f.Fuzz(func(t *testing.T, value []byte, markEpoch uint64, known, held bool, node string, missed uint64) {
		missed %= 1000
		a := &auditor{maxTTL: time.Minute, watch: 1, seen: 10, marks: &epochMarks{m: map[string]epochMark{}}}
		m := epochMark{Epoch: markEpoch, Rev: 100, watch: 1, seen: 5, known: known, held: held, node: node}
		e := &entry{key: wire.RecordKey("id"), value: value, rev: 106 + missed, created: at, op: jetstream.KeyValuePut}
		v := a.judge(m, e, false, writer{}, false)
		if v.kind == "" {
			rec, err := wire.DecodeRecord(value)
			require.NoError(t, err, "honest, and does not decode")
			require.GreaterOrEqual(t, rec.Epoch, m.Epoch, "honest, and below the mark")
			require.GreaterOrEqual(t, v.next.Epoch, m.Epoch, "the mark went back")
			if known && rec.State == wire.StateHeld && rec.Epoch == m.Epoch {
				require.True(t, held && rec.Node == node, "an ended epoch held again, judged honest")
			}
			return
		}
		require.GreaterOrEqual(t, v.epoch, m.Epoch, "freed below the mark")
		require.GreaterOrEqual(t, a.freed(m, e, v, true).Epoch, m.Epoch, "the mark after a free went back")
	})
}
