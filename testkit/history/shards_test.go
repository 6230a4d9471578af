package history

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/internal/wire"
)

// shardPair is two ids of one shard of 4, and the shard's unit.
func shardPair(t *testing.T) (a, b, unit string) {
	first := map[int]string{}
	for i := range 1000 {
		id := "s-" + strconv.Itoa(i)
		q := wire.ShardOf(id, 4)
		if o, ok := first[q]; ok {
			return o, id, wire.ShardUnit(q)
		}
		first[q] = id
	}
	t.Fatal("no two ids share a shard")
	return
}

// TestCheckShards: a sound history of two ids of one shard (n1 delivers
// a1 and b1 and commits the shard's cursor over both; n2 takes the shard
// over, delivers a2 and commits) passes; its per-unit and coverage rules
// each catch their violation: a commit whose cursor covers b2, which was
// never delivered (a stale commit, and lost); and a delivery of b's under
// epoch 1 after a's under epoch 2 (before b's own) (a stale delivery across the ids of the
// shard, which the per-id check does not see). The verify package's
// TestCheck_Shards runs more of them through verify's check.
func TestCheckShards(t *testing.T) {
	a, b, unit := shardPair(t)
	mk := func() History {
		h := History{}
		for i, s := range []struct{ id, k string }{{a, "a1"}, {b, "b1"}, {a, "a2"}, {b, "b2"}} {
			h.Sends = append(h.Sends, Send{Producer: "p-" + s.id, ID: s.id, Key: s.k, Outcome: Posted, Seq: uint64(i + 1), Invoked: at(i), Returned: at(i)})
		}
		h.Deliveries = []Delivery{
			{ID: a, Key: "a1", Seq: 1, Node: "n1", Epoch: 1, Revision: 5, At: at(10)},
			{ID: b, Key: "b1", Seq: 2, Node: "n1", Epoch: 1, Revision: 5, At: at(11)},
			{ID: a, Key: "a2", Seq: 3, Node: "n2", Epoch: 2, Revision: 8, At: at(25)},
			{ID: b, Key: "b2", Seq: 4, Node: "n2", Epoch: 2, Revision: 8, At: at(31)},
		}
		h.Commits = []Commit{
			{ID: unit, Node: "n1", Epoch: 1, Revision: 5, Cursor: 2, StreamSeq: 7, At: at(15)},
			{ID: unit, Node: "n2", Epoch: 2, Revision: 8, Cursor: 4, StreamSeq: 9, At: at(35)},
		}
		return h
	}
	rep := CheckShards(mk(), 4, nil, false)
	require.True(t, rep.OK(), rep.String())
	require.Equal(t, 1, rep.Takeovers)

	h := mk()
	h.Deliveries = h.Deliveries[:3] // b2 never delivered, yet covered
	rep = CheckShards(h, 4, nil, false)
	require.Equal(t, 1, rep.StaleCommits, rep.String())
	require.Equal(t, 1, rep.Lost, rep.String())
	// ... unless the cursor excepts b (its handler failed on b2).
	rep = CheckShards(h, 4, map[uint64]map[string]wire.PendingID{9: {wire.EncodeID(b): {Seq: 4}}}, false)
	require.Zero(t, rep.StaleCommits, rep.String())

	h = mk()
	h.Deliveries = append(h.Deliveries, Delivery{ID: b, Key: "b1", Seq: 2, Node: "n1", Epoch: 1, Revision: 5, At: at(28)})
	require.Zero(t, Check(h).StaleDeliveries, "per id, b's epoch 2 acts only at 31: no stale delivery")
	rep = CheckShards(h, 4, nil, false)
	require.Equal(t, 1, rep.StaleDeliveries, rep.String())
	require.Equal(t, unit, UnitOf(b, 4))
	require.Equal(t, b, UnitOf(b, 0))
}
