package shard

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/internal/store"
	"github.com/fencepost/fencepost/internal/wire"
)

// stateHolder is a holder with only what stateFor reads: two ids whose
// handled messages interleave (a at odd sequences, b at even ones, 1 to
// n), each writing key(seq).
func stateHolder(n int, key func(seq uint64) string) *holder {
	h := &holder{wk: &Worker{cfg: Config{State: true}}, unc: map[string][]handled{}}
	for seq := uint64(1); seq <= uint64(n); seq++ {
		eid := wire.EncodeID("a")
		if seq%2 == 0 {
			eid = wire.EncodeID("b")
		}
		h.unc[eid] = append(h.unc[eid], handled{seq: seq, writes: []store.StateWrite{{Key: key(seq), Value: []byte(fmt.Sprint(seq))}}})
	}
	return h
}

// TestStateFor_StopsWhereTheWritesRunOut: when the handled messages a
// cursor covers write more keys than one batch takes, the cursor stops
// before the first message, in stream order, whose writes do not fit,
// whichever id it is of, and the batch carries exactly the writes of the
// messages below it.
func TestStateFor_StopsWhereTheWritesRunOut(t *testing.T) {
	h := stateHolder(1200, func(seq uint64) string { return fmt.Sprint("k", seq) })
	c, writes := h.stateFor(wire.ShardCursor{Seq: 1200})
	require.Equal(t, uint64(maxBatchWrites), c.Seq, "the cursor stops before message 1000")
	require.Len(t, writes, maxBatchWrites)
	for _, w := range writes {
		var seq uint64
		_, err := fmt.Sscanf(w.Key, "k%d", &seq)
		require.NoError(t, err)
		require.LessOrEqual(t, seq, c.Seq, "only the writes of the messages the cursor covers")
		require.Equal(t, map[bool]string{true: "a", false: "b"}[seq%2 == 1], w.ID)
	}
}

// TestStateFor_LastValueOfEachKey: writes that fit in one batch carry
// each id's key once, with the value of the id's last message the cursor
// covers (a message above the mark keeps its writes for later).
func TestStateFor_LastValueOfEachKey(t *testing.T) {
	h := stateHolder(300, func(uint64) string { return "count" })
	c, writes := h.stateFor(wire.ShardCursor{Seq: 250})
	require.Equal(t, uint64(250), c.Seq)
	got := map[string]string{}
	for _, w := range writes {
		_, dup := got[w.ID]
		require.False(t, dup, "one write of %s's key", w.ID)
		got[w.ID] = string(w.Value)
	}
	require.Equal(t, map[string]string{"a": "249", "b": "250"}, got)
}

// TestStateCommitted_KeepsWhatTheCursorDoesNotCover: a commit drops only
// the writes of the messages its cursor covers. The cursor was made while
// b's message 10 had failed (b pending from 10, mark 20); b's retry then
// succeeded, 10 to 20 handled, before the commit's answer came. Those
// messages are at or below the mark and not covered, so their writes stay
// for the next commit, which covers them and carries them. Dropping every
// write at or below the mark lost them while the next cursor went on to
// cover their messages (found when state commits went to every 200 ms:
// TestShards_StateBatchFailsMidway ended with a count short for ever).
func TestStateCommitted_KeepsWhatTheCursorDoesNotCover(t *testing.T) {
	h := stateHolder(20, func(uint64) string { return "count" })
	b := wire.EncodeID("b")
	sent := wire.ShardCursor{Seq: 20, Pending: map[string]wire.PendingID{b: {Seq: 10, Failures: 1}}}
	_, writes := h.stateFor(sent)
	require.ElementsMatch(t, []store.IDStateWrite{
		{ID: "a", StateWrite: store.StateWrite{Key: "count", Value: []byte("19")}},
		{ID: "b", StateWrite: store.StateWrite{Key: "count", Value: []byte("8")}},
	}, writes, "the batch carries b's writes below its pending message only")

	h.stateCommitted(sent)
	require.Empty(t, h.unc[wire.EncodeID("a")], "a's writes were all committed")
	var kept []uint64
	for _, x := range h.unc[b] {
		kept = append(kept, x.seq)
	}
	require.Equal(t, []uint64{10, 12, 14, 16, 18, 20}, kept, "b's writes from its pending message on are kept")

	next, writes := h.stateFor(wire.ShardCursor{Seq: 20})
	require.Empty(t, next.Pending)
	require.Equal(t, []store.IDStateWrite{{ID: "b", StateWrite: store.StateWrite{Key: "count", Value: []byte("20")}}}, writes,
		"the next commit carries them")
}
