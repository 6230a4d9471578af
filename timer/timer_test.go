package timer_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/queue"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/timer"
	"github.com/fencepost/fencepost/world"
)

// inMailbox is the number of messages stored in id's mailbox.
func inMailbox(t *testing.T, w *client.World, id string) uint64 {
	t.Helper()
	subj := wire.MailboxSubject(w.Name, id)
	if w.Config.Shards > 0 {
		subj = wire.ShardMailboxSubject(w.Name, id, w.Config.Shards)
	}
	info, err := handles.Of(w).Mailbox.Info(testutil.Ctx(t, 10*time.Second), jetstream.WithSubjectFilter(subj))
	require.NoError(t, err)
	return info.State.Subjects[subj]
}

// TestTimers_ListCancelStat: pending timers are listed (sorted by id and
// key, paged by whole ids) and counted; a cancelled one never fires, and
// cancelling it again, or one that fired, finds none; stat counts what
// is pending and what fired; sweep removes the fired copies the mailbox
// took in. Per-id and sharded worlds.
func TestTimers_ListCancelStat(t *testing.T) {
	env := testutil.Start(t, testutil.Target{Name: "single"})
	for _, shards := range []int{0, 4} {
		t.Run(map[int]string{0: "per-id", 4: "sharded"}[shards], func(t *testing.T) {
			testListCancelStat(t, env, shards)
		})
	}
}

func testListCancelStat(t *testing.T, env *testutil.Env, shards int) {
	ctx := testutil.Ctx(t, time.Minute)
	w := env.World(t, world.Config{Shards: shards})
	send := func(id, key, body string, d time.Duration) queue.Posted {
		p, err := w.Send(ctx, id, []byte(body), queue.WithAfter(d), queue.WithTimerKey(key), queue.WithFrom("me"))
		require.NoError(t, err)
		return p
	}
	late := send("b", "k2", "late", time.Hour)
	send("b", "k1", "later", 2*time.Hour)
	send("a", "k", "a", time.Hour)
	cancelled := send("c", "x", "cancelled", 1500*time.Millisecond)
	send("c", "y", "fires", 1500*time.Millisecond)

	page, err := w.Timers.List(ctx, timer.ListOptions{})
	require.NoError(t, err)
	var got []string
	for _, tm := range page.Timers {
		got = append(got, tm.ID+"/"+tm.Key)
	}
	require.Equal(t, []string{"a/k", "b/k1", "b/k2", "c/x", "c/y"}, got)
	require.False(t, page.More)
	tm := page.Timers[2]
	require.True(t, tm.At.Equal(late.At), "%v %v", tm.At, late.At)
	require.Equal(t, "me", tm.From)
	require.Equal(t, 4, tm.Size)
	require.Equal(t, late.Seq, tm.Seq)

	page, err = w.Timers.List(ctx, timer.ListOptions{Limit: 2})
	require.NoError(t, err)
	require.Len(t, page.Timers, 1, "whole ids: b's two would go over")
	require.True(t, page.More)
	require.Equal(t, "a", page.Next)
	page, err = w.Timers.List(ctx, timer.ListOptions{Limit: 2, After: "a"})
	require.NoError(t, err)
	require.Len(t, page.Timers, 2)
	require.Equal(t, "b", page.Next)
	page, err = w.Timers.List(ctx, timer.ListOptions{ID: "c"})
	require.NoError(t, err)
	require.Len(t, page.Timers, 2)

	st, err := w.Timers.Stat(ctx, "")
	require.NoError(t, err)
	require.Equal(t, uint64(5), st.Pending)
	st, err = w.Timers.Stat(ctx, "b")
	require.NoError(t, err)
	require.Equal(t, uint64(2), st.Pending)
	require.True(t, st.Next.Equal(late.At))

	ok, err := w.Timers.Cancel(ctx, "c", "x")
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = w.Timers.Cancel(ctx, "c", "x")
	require.NoError(t, err)
	require.False(t, ok, "cancelled already")
	ok, err = w.Timers.Cancel(ctx, "nobody", "x")
	require.NoError(t, err)
	require.False(t, ok)
	_, err = w.Timers.Cancel(ctx, "c", "a.b")
	require.ErrorIs(t, err, wire.ErrInvalidTimerKey)

	// y fires; x, cancelled, never does.
	testutil.WaitFor(t, 15*time.Second, "c/y fired", func() bool { return inMailbox(t, w, "c") == 1 })
	testutil.WaitFor(t, 5*time.Second, "past x's time", func() bool { return time.Since(cancelled.At) > time.Second })
	require.Equal(t, uint64(1), inMailbox(t, w, "c"), "the cancelled timer never fired")
	ok, err = w.Timers.Cancel(ctx, "c", "y")
	require.NoError(t, err)
	require.False(t, ok, "it fired")

	st, err = w.Timers.Stat(ctx, "")
	require.NoError(t, err)
	require.Equal(t, uint64(3), st.Pending)
	require.Zero(t, st.Waiting)
	require.NotZero(t, st.Sourced)
	n, err := w.Timers.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(1), n, "y's fired copy")
	n, err = w.Timers.Sweep(ctx)
	require.NoError(t, err)
	require.Zero(t, n)
	require.Equal(t, uint64(1), inMailbox(t, w, "c"), "the mailbox keeps it")
}

// TestTimers_Waiting: a fired timer whose mailbox is full waits in the
// timer stream (stat says since when) and holds back the world's later
// fired timers, and enters once there is room: none is lost.
func TestTimers_Waiting(t *testing.T) {
	env := testutil.Start(t, testutil.Target{Name: "single"})
	ctx := testutil.Ctx(t, time.Minute)
	w := env.World(t, world.Config{MaxMsgsPerMailbox: 1})
	_, err := w.Send(ctx, "full", []byte("x"))
	require.NoError(t, err)
	p, err := w.Send(ctx, "full", []byte("t"), queue.WithAfter(time.Second))
	require.NoError(t, err)
	_, err = w.Send(ctx, "other", []byte("t"), queue.WithAt(p.At.Add(100*time.Millisecond)))
	require.NoError(t, err)
	var st timer.Stat
	testutil.WaitFor(t, 15*time.Second, "both fired and waiting", func() bool {
		st, err = w.Timers.Stat(ctx, "")
		require.NoError(t, err)
		return st.Pending == 0 && st.Waiting == 2
	})
	require.False(t, st.WaitingSince.Before(p.At))
	require.Zero(t, inMailbox(t, w, "other"), "held back behind the full mailbox")

	require.NoError(t, handles.Of(w).Mailbox.Purge(ctx, jetstream.WithPurgeSubject(wire.MailboxSubject(w.Name, "full"))))
	testutil.WaitFor(t, 30*time.Second, "both in their mailboxes", func() bool {
		return inMailbox(t, w, "full") == 1 && inMailbox(t, w, "other") == 1
	})
	st, err = w.Timers.Stat(ctx, "")
	require.NoError(t, err)
	require.Zero(t, st.Waiting)
}
