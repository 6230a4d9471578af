package mailbox_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/mailbox"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// shardIDs returns two ids of one shard and one of another, among n.
func shardIDs(t *testing.T, n int) (a, b, c string) {
	t.Helper()
	byShard := map[int][]string{}
	for i := range 1000 {
		id := fmt.Sprintf("id-%d", i)
		q := wire.ShardOf(id, n)
		byShard[q] = append(byShard[q], id)
		if len(byShard[q]) == 2 {
			a, b = byShard[q][0], byShard[q][1]
			break
		}
	}
	for i := range 1000 {
		id := fmt.Sprintf("other-%d", i)
		if wire.ShardOf(id, n) != wire.ShardOf(a, n) {
			return a, b, id
		}
	}
	t.Fatal("no ids found")
	return
}

// seqs posts bodies to id and returns their sequences.
func seqs(t *testing.T, ctx context.Context, w *client.World, id string, bodies ...string) []uint64 {
	t.Helper()
	var out []uint64
	for _, body := range bodies {
		p, err := w.Queue.Send(ctx, id, []byte(body))
		require.NoError(t, err)
		out = append(out, p.Seq)
	}
	return out
}

// TestStat_Sharded: in a sharded world an id's stat reads its mail where
// the stream stores it (under its shard), its owner is its shard's
// record, and its depth counts from its shard's cursor: the messages the
// cursor commits do not count, those of a pending id do (with its
// failures). The world's totals and the listing count the ids' mail, and
// the listing shows each id (never a shard's record) with its shard's
// owner.
func TestStat_Sharded(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	ctx := testutil.Ctx(t, time.Minute)
	const n = 4
	w, _ := newWorld(t, env, world.Config{Shards: n})
	a, b, c := shardIDs(t, n)
	qa := wire.ShardOf(a, n)

	sa := seqs(t, ctx, w, a, "a1", "a2")
	sb := seqs(t, ctx, w, b, "b1")
	sa = append(sa, seqs(t, ctx, w, a, "a3")...)
	seqs(t, ctx, w, c, "c1", "c2")
	_, err := w.Ownership.Claim(ctx, wire.ShardUnit(qa), "n1", time.Minute)
	require.NoError(t, err)

	for _, tc := range []struct {
		id    string
		depth uint64
		held  bool
	}{{a, 3, true}, {b, 1, true}, {c, 2, false}} {
		st, err := w.Mailboxes.Stat(ctx, tc.id)
		require.NoError(t, err, tc.id)
		require.Equal(t, tc.depth, st.Depth, "id %s: its posts, stored under its shard", tc.id)
		require.False(t, st.Oldest.IsZero(), tc.id)
		require.Equal(t, tc.held, st.Owner.Held, "id %s: its shard's owner", tc.id)
		if tc.held {
			require.Equal(t, "n1", st.Owner.Node)
			require.EqualValues(t, 1, st.Owner.Epoch)
		}
	}
	_, err = w.Mailboxes.Stat(ctx, "")
	require.ErrorIs(t, err, wire.ErrInvalidID)

	ws, err := w.Mailboxes.WorldStat(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, ws.IDs)
	require.EqualValues(t, 6, ws.Depth)
	require.Zero(t, ws.Unroutable)
	require.Equal(t, 1, ws.Owned, "one shard held")

	page, err := w.Mailboxes.List(ctx, mailbox.ListOptions{Limit: 10})
	require.NoError(t, err)
	require.Len(t, page.Entries, 3, "the ids, not the shard's record: %+v", page.Entries)
	for _, e := range page.Entries {
		require.NotContains(t, e.ID, "shard/")
		require.Equal(t, e.ID != c, e.Owner.Held, "id %s: its shard's owner", e.ID)
	}
	page, err = w.Mailboxes.List(ctx, mailbox.ListOptions{Limit: 10, HeldBy: "n1", WithMail: true})
	require.NoError(t, err)
	got := []string{}
	for _, e := range page.Entries {
		got = append(got, e.ID)
	}
	require.ElementsMatch(t, []string{a, b}, got, "held by n1: the ids of its shard")

	// The shard's holder commits a1, a2 and passes b1, which failed twice:
	// a's depth is a3 alone; b's is b1, with its failures.
	cur, err := wire.EncodeShardCursor(wire.ShardCursor{Seq: sa[2] - 1, Pending: map[string]wire.PendingID{
		wire.EncodeID(b): {Seq: sb[0], Failures: 2, Error: "boom"},
	}})
	require.NoError(t, err)
	testutil.Publish(t, ctx, w, wire.KeySubject(w.Name, wire.CursorKey(wire.ShardUnit(qa))), string(cur))
	st, err := w.Mailboxes.Stat(ctx, a)
	require.NoError(t, err)
	require.EqualValues(t, 1, st.Depth)
	require.Equal(t, sa[2]-1, st.Cursor)
	require.Zero(t, st.Failures)
	require.EqualValues(t, 2, st.CommittedStored)
	require.True(t, st.CommittedOldest.Before(st.Oldest), "a1's posting time, before a3's")
	committedOldest := st.CommittedOldest
	st, err = w.Mailboxes.Stat(ctx, b)
	require.NoError(t, err)
	require.EqualValues(t, 1, st.Depth)
	require.Equal(t, sb[0]-1, st.Cursor, "a pending id's committed point: below its first message")
	require.Equal(t, 2, st.Failures)
	require.Zero(t, st.CommittedStored)
	require.True(t, st.CommittedOldest.IsZero(), "b has nothing committed")
	ws, err = w.Mailboxes.WorldStat(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 4, ws.Depth, "a3, b1, c1, c2: a1 and a2 are committed by their shard's cursor")
	require.Equal(t, 3, ws.IDs)
	require.EqualValues(t, 2, ws.CommittedStored)
	require.Equal(t, committedOldest, ws.CommittedOldest, "a1's, the world's oldest committed message")
	page, err = w.Mailboxes.List(ctx, mailbox.ListOptions{Limit: 10, WithMail: true})
	require.NoError(t, err)
	depths := map[string]uint64{}
	for _, e := range page.Entries {
		depths[e.ID] = e.Depth
	}
	require.Equal(t, map[string]uint64{a: 1, b: 1, c: 2}, depths)
}
