package verify

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/testkit/history"
)

// twoOfAShard are two ids of one shard among n, and that shard's unit.
func twoOfAShard(t *testing.T, n int) (a, b, unit string) {
	t.Helper()
	first := map[int]string{}
	for i := range 1000 {
		id := "v-" + strconv.Itoa(i)
		q := wire.ShardOf(id, n)
		if o, ok := first[q]; ok {
			return o, id, wire.ShardUnit(q)
		}
		first[q] = id
	}
	t.Fatal("no two ids share a shard")
	return
}

// shardHistory is a sound history of a sharded world (4 shards): ids a
// and b of one shard, each with its producer; n1 (epoch 1) delivers k1
// and k2 and commits the shard's cursor at 2; n2 takes the shard over
// (epoch 2), delivers k3 and k4 and commits 4. edit changes it before the
// commits are made.
func shardHistory(t *testing.T, edit func(ds []history.Delivery, at func(int) time.Time) ([]history.Delivery, []history.Commit)) (*Recorded, string, string, string) {
	a, b, unit := twoOfAShard(t, 4)
	t0 := time.Date(2026, 12, 1, 5, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	rec := history.NewRecorder()
	for i, s := range []struct{ p, id, k string }{{"p0", a, "k1"}, {"p1", b, "k2"}, {"p0", a, "k3"}, {"p1", b, "k4"}} {
		rec.SendDone(rec.SendInvoked(s.p, s.id, s.k), history.Posted, uint64(i+1))
	}
	ds := []history.Delivery{
		{ID: a, Key: "k1", Seq: 1, Node: "n1", Epoch: 1, Revision: 5, At: at(10)},
		{ID: b, Key: "k2", Seq: 2, Node: "n1", Epoch: 1, Revision: 5, At: at(12)},
		{ID: a, Key: "k3", Seq: 3, Node: "n2", Epoch: 2, Revision: 8, At: at(30)},
		{ID: b, Key: "k4", Seq: 4, Node: "n2", Epoch: 2, Revision: 8, At: at(32)},
	}
	cs := []history.Commit{
		{ID: unit, Node: "n1", Epoch: 1, Revision: 5, Cursor: 2, StreamSeq: 7, At: at(15)},
		{ID: unit, Node: "n2", Epoch: 2, Revision: 8, Cursor: 4, StreamSeq: 9, At: at(35)},
	}
	if edit != nil {
		ds, cs = edit(ds, at)
	}
	for _, d := range ds {
		rec.Deliver(d)
	}
	h := rec.History()
	h.Commits = cs
	return &Recorded{Meta: Meta{World: "verify-test", Shards: 4, Drained: true, FollowerCurrent: true}, History: h}, a, b, unit
}

// TestCheck_Shards: the checks of a sharded world's run. A shard cursor
// write that newly covers a message delivered only under an older epoch,
// or never delivered, is a stale commit (the second also lost); a
// delivery of one id under an epoch after another id of its shard was
// delivered under a newer one is a stale delivery (the shard's epoch is
// one for all its ids); a pending id's exception lets the cursor pass it;
// a takeover that delivers what it commits passes; every verdict survives
// the history file.
func TestCheck_Shards(t *testing.T) {
	roundTrip := func(t *testing.T, rec *Recorded) {
		t.Helper()
		var buf bytes.Buffer
		require.NoError(t, WriteHistory(&buf, rec))
		back, err := ReadHistory(&buf)
		require.NoError(t, err)
		require.Equal(t, rec.Meta.Shards, back.Meta.Shards)
		require.Equal(t, counts(Check(rec)), counts(Check(back)))
	}
	examples := func(v Verdict) string { return strings.Join(v.Examples, "\n") }

	t.Run("takeover", func(t *testing.T) {
		rec, _, _, _ := shardHistory(t, nil)
		v := Check(rec)
		require.Equal(t, Passed, v.Outcome, "%+v", v)
		require.Equal(t, 1, v.Report.Takeovers, "one takeover of the shard, not one per id")
		roundTrip(t, rec)
	})

	t.Run("covered, delivered under an older epoch only", func(t *testing.T) {
		rec, _, _, _ := shardHistory(t, func(ds []history.Delivery, at func(int) time.Time) ([]history.Delivery, []history.Commit) {
			// n1 delivers k3 and k4 too; a commit accepted under epoch
			// 2's record covers them before n2 delivers them.
			ds = append(ds[:2], history.Delivery{ID: ds[2].ID, Key: "k3", Seq: 3, Node: "n1", Epoch: 1, Revision: 5, At: at(20)},
				history.Delivery{ID: ds[3].ID, Key: "k4", Seq: 4, Node: "n1", Epoch: 1, Revision: 5, At: at(21)},
				history.Delivery{ID: ds[2].ID, Key: "k3", Seq: 3, Node: "n2", Epoch: 2, Revision: 8, At: at(40)})
			return ds, []history.Commit{
				{ID: wire.ShardUnit(wire.ShardOf(ds[0].ID, 4)), Node: "n1", Epoch: 1, Revision: 5, Cursor: 2, StreamSeq: 7, At: at(15)},
				{ID: wire.ShardUnit(wire.ShardOf(ds[0].ID, 4)), Node: "n2", Epoch: 2, Revision: 8, Cursor: 4, StreamSeq: 9, At: at(25)},
			}
		})
		v := Check(rec)
		require.Equal(t, Violated, v.Outcome)
		require.Equal(t, 1, counts(v)["stale_commits"], examples(v))
		require.Zero(t, counts(v)["lost"])
		require.Contains(t, examples(v), "covering 2 message(s) not delivered under epoch 2")
		roundTrip(t, rec)
	})

	t.Run("covered, never delivered", func(t *testing.T) {
		rec, _, b, unit := shardHistory(t, func(ds []history.Delivery, at func(int) time.Time) ([]history.Delivery, []history.Commit) {
			u := wire.ShardUnit(wire.ShardOf(ds[0].ID, 4))
			return ds[:3], []history.Commit{ // k4 is never delivered
				{ID: u, Node: "n1", Epoch: 1, Revision: 5, Cursor: 2, StreamSeq: 7, At: at(15)},
				{ID: u, Node: "n2", Epoch: 2, Revision: 8, Cursor: 4, StreamSeq: 9, At: at(35)},
			}
		})
		v := Check(rec)
		require.Equal(t, Violated, v.Outcome)
		require.Equal(t, 1, counts(v)["stale_commits"], examples(v))
		require.Equal(t, 1, counts(v)["lost"], examples(v))
		require.Contains(t, examples(v), "stale commit: "+unit)
		require.Contains(t, examples(v), b+" seq 4 never delivered")
		roundTrip(t, rec)
	})

	t.Run("stale delivery across the ids of a shard", func(t *testing.T) {
		rec, _, _, _ := shardHistory(t, func(ds []history.Delivery, at func(int) time.Time) ([]history.Delivery, []history.Commit) {
			// n1 (epoch 1) hands b's k4 to its handler after n2 (epoch 2)
			// delivered a's k3: stale for the shard, though b had seen no
			// epoch 2 yet.
			ds = append(ds, history.Delivery{ID: ds[3].ID, Key: "k4", Seq: 4, Node: "n1", Epoch: 1, Revision: 5, At: at(31)})
			u := wire.ShardUnit(wire.ShardOf(ds[0].ID, 4))
			return ds, []history.Commit{
				{ID: u, Node: "n1", Epoch: 1, Revision: 5, Cursor: 2, StreamSeq: 7, At: at(15)},
				{ID: u, Node: "n2", Epoch: 2, Revision: 8, Cursor: 4, StreamSeq: 9, At: at(35)},
			}
		})
		v := Check(rec)
		require.Equal(t, 1, counts(v)["stale_deliveries"], examples(v))
		require.Zero(t, counts(v)["stale_commits"], examples(v))
	})

	t.Run("pending id", func(t *testing.T) {
		// b fails at k2 under n1, whose commit passes k3 excepting b from
		// k2 (seq 2); n2 takes over, delivers k2 again and k4, and commits
		// 4, newly covering k2 and k4.
		rec, _, b, _ := shardHistory(t, func(ds []history.Delivery, at func(int) time.Time) ([]history.Delivery, []history.Commit) {
			a, b, u := ds[0].ID, ds[1].ID, wire.ShardUnit(wire.ShardOf(ds[0].ID, 4))
			return []history.Delivery{
					{ID: a, Key: "k1", Seq: 1, Node: "n1", Epoch: 1, Revision: 5, At: at(10)},
					{ID: b, Key: "k2", Seq: 2, Node: "n1", Epoch: 1, Revision: 5, At: at(12)},
					{ID: a, Key: "k3", Seq: 3, Node: "n1", Epoch: 1, Revision: 5, At: at(14)},
					{ID: b, Key: "k2", Seq: 2, Node: "n2", Epoch: 2, Revision: 8, At: at(31)},
					{ID: b, Key: "k4", Seq: 4, Node: "n2", Epoch: 2, Revision: 8, At: at(32)},
				}, []history.Commit{
					{ID: u, Node: "n1", Epoch: 1, Revision: 5, Cursor: 3, StreamSeq: 7, At: at(15)},
					{ID: u, Node: "n2", Epoch: 2, Revision: 8, Cursor: 4, StreamSeq: 9, At: at(35)},
				}
		})
		rec.Pending = map[uint64]map[string]wire.PendingID{7: {wire.EncodeID(b): {Seq: 2, Failures: 1, Error: "x"}}}
		v := Check(rec)
		require.Equal(t, Passed, v.Outcome, examples(v))
		roundTrip(t, rec)
		// Without n2's delivery of k2, n2's commit covers it under epoch 2
		// with only epoch 1's delivery: stale.
		h := &rec.History
		all := h.Deliveries
		h.Deliveries = append(all[:3:3], all[4])
		v = Check(rec)
		require.Equal(t, 1, counts(v)["stale_commits"], examples(v))
		require.Contains(t, examples(v), "n2/2 stored cursor 4")
		roundTrip(t, rec)
		// Without the exception, n1's commit covers k2; with n1's delivery
		// of k2 gone too, that commit is stale (and k2 is lost).
		delete(rec.Pending, 7)
		h.Deliveries = append(append([]history.Delivery{}, all[0]), all[2], all[4])
		v = Check(rec)
		require.Equal(t, 1, counts(v)["stale_commits"], examples(v))
		require.Equal(t, 1, counts(v)["lost"], examples(v))
		require.Contains(t, examples(v), "n1/1 stored cursor 3")
	})
}
