package mailbox_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/mailbox"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// Committed mail is not waiting: a worker that stopped
// cleanly left each id's last messages committed but not yet removed, and
// world stat said depth=101, ls --with-mail listed every id with depth=10,
// while stat of an id said depth=0. Depth and WithMail count from the
// cursor everywhere; what is committed and still stored is counted
// apart. Here the world purges by fencepostd (which does not run), so
// every commit leaves its messages stored, on worlds with and without
// partitions.
func TestCounts_CommittedNotWaiting(t *testing.T) {
	env := testutil.Start(t, testutil.Target{Name: "single"})
	for _, parts := range []int{0, 64} {
		t.Run(fmt.Sprintf("partitions=%d", parts), func(t *testing.T) {
			ctx := testutil.Ctx(t, time.Minute)
			w, d := newWorld(t, env, world.Config{Purge: world.PurgeByServer, Partitions: parts})
			// done: 10 messages, all committed; half: 4 committed, 3
			// waiting; fresh: 2, never drained.
			for i := range 10 {
				send(t, ctx, w, "done", fmt.Sprint("d", i))
			}
			for i := range 4 {
				send(t, ctx, w, "half", fmt.Sprint("h", i))
			}
			for _, id := range []string{"done", "half"} {
				lease, err := w.Ownership.Claim(ctx, id, "n1", time.Minute)
				require.NoError(t, err)
				var rec testutil.Recorder
				_, err = d.DrainLease(ctx, lease, rec.Handle)
				require.NoError(t, err)
			}
			send(t, ctx, w, "half", "h4", "h5", "h6")
			send(t, ctx, w, "fresh", "f0", "f1")

			st, err := w.Mailboxes.Stat(ctx, "done")
			require.NoError(t, err)
			require.Zero(t, st.Depth)
			require.EqualValues(t, 10, st.CommittedStored)
			st, err = w.Mailboxes.Stat(ctx, "half")
			require.NoError(t, err)
			require.EqualValues(t, 3, st.Depth)
			require.EqualValues(t, 4, st.CommittedStored)
			require.NotZero(t, st.NextSeq)

			ws, err := w.Mailboxes.WorldStat(ctx)
			require.NoError(t, err)
			require.EqualValues(t, 5, ws.Depth, "committed mail counted as waiting")
			require.Equal(t, 2, ws.IDs, "an id whose mail is all committed has none waiting")
			require.EqualValues(t, 14, ws.CommittedStored)

			page, err := w.Mailboxes.List(ctx, mailbox.ListOptions{WithMail: true, Limit: 10})
			require.NoError(t, err)
			require.Equal(t, []string{"fresh", "half"}, listIDs(page), "--with-mail listed an id with nothing waiting")
			require.EqualValues(t, 2, page.Entries[0].Depth)
			require.EqualValues(t, 3, page.Entries[1].Depth)
			require.EqualValues(t, 4, page.Entries[1].CommittedStored)
			// Paged one at a time, the id with nothing waiting is passed
			// over, and the cut is right.
			page, err = w.Mailboxes.List(ctx, mailbox.ListOptions{WithMail: true, Limit: 1, After: "done"})
			require.NoError(t, err)
			require.Equal(t, []string{"fresh"}, listIDs(page))
			require.True(t, page.More)
			page, err = w.Mailboxes.List(ctx, mailbox.ListOptions{WithMail: true, Limit: 1, After: "fresh"})
			require.NoError(t, err)
			require.Equal(t, []string{"half"}, listIDs(page))
			require.False(t, page.More)

			page, err = w.Mailboxes.List(ctx, mailbox.ListOptions{Limit: 10})
			require.NoError(t, err)
			require.Equal(t, []string{"done", "fresh", "half"}, listIDs(page))
			require.Zero(t, page.Entries[0].Depth)
			require.EqualValues(t, 10, page.Entries[0].CommittedStored)
		})
	}
}

// TestCounts_CommittedOldest: stat says how long committed mail has waited
// for its removal, from the oldest committed message still stored, past
// older mail that is still waiting; nothing committed, no age. On a
// per-id world whose purge (fencepostd's) does not run here.
func TestCounts_CommittedOldest(t *testing.T) {
	env := testutil.Start(t, testutil.Target{Name: "single"})
	ctx := testutil.Ctx(t, time.Minute)
	w, d := newWorld(t, env, world.Config{Purge: world.PurgeByServer})
	send(t, ctx, w, "waits", "w0", "w1") // the front of the stream: never drained
	send(t, ctx, w, "done", "d0", "d1", "d2")

	ws, err := w.Mailboxes.WorldStat(ctx)
	require.NoError(t, err)
	require.Zero(t, ws.CommittedStored)
	require.True(t, ws.CommittedOldest.IsZero(), "nothing committed, yet an age")
	before, err := w.Mailboxes.Stat(ctx, "done")
	require.NoError(t, err)
	require.True(t, before.CommittedOldest.IsZero())

	lease, err := w.Ownership.Claim(ctx, "done", "n1", time.Minute)
	require.NoError(t, err)
	var rec testutil.Recorder
	_, err = d.DrainLease(ctx, lease, rec.Handle)
	require.NoError(t, err)
	send(t, ctx, w, "done", "d3")

	st, err := w.Mailboxes.Stat(ctx, "done")
	require.NoError(t, err)
	require.EqualValues(t, 3, st.CommittedStored)
	require.Equal(t, before.Oldest, st.CommittedOldest, "d0's posting time")
	waits, err := w.Mailboxes.Stat(ctx, "waits")
	require.NoError(t, err)
	require.True(t, waits.CommittedOldest.IsZero())
	ws, err = w.Mailboxes.WorldStat(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 3, ws.CommittedStored)
	require.Equal(t, st.CommittedOldest, ws.CommittedOldest, "d0's, past w0 and w1 that wait")
	require.True(t, ws.CommittedOldest.After(waits.Oldest))
}
