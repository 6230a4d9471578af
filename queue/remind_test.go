package queue_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/daemon"
	"github.com/fencepost/fencepost/fencing"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/queue"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// timerOn is the last message stored on id's timer key, nil for none.
func timerOn(t *testing.T, w *client.World, id, key string) *jetstream.RawStreamMsg {
	t.Helper()
	m, err := jsapi.LeaderGet(testutil.Ctx(t, 10*time.Second), handles.Of(w).JS.Conn(), wire.TimerStream(w.Name), jsapi.GetRequest{LastFor: wire.TimerSubject(w.Name, id, key)})
	if errors.Is(err, jsapi.ErrNotFound) {
		return nil
	}
	require.NoError(t, err)
	return m
}

// intentOn is the value of id's reminder intent key, nil when it has
// none (never written, or deleted: a delete marker).
func intentOn(t *testing.T, w *client.World, id, key string) *jetstream.RawStreamMsg {
	t.Helper()
	m, err := jsapi.LeaderGet(testutil.Ctx(t, 10*time.Second), handles.Of(w).JS.Conn(), wire.BucketStream(w.Name), jsapi.GetRequest{LastFor: wire.ReminderSubject(w.Name, id, key)})
	if errors.Is(err, jsapi.ErrNotFound) {
		return nil
	}
	require.NoError(t, err)
	if jsapi.IsMarker(m.Header) {
		return nil
	}
	return m
}

// holder holds id's unit of w for a node, seizing it from whoever holds it.
func holder(t *testing.T, w *client.World, id string) func(node string) fencing.Fence {
	u, err := w.Unit(id)
	require.NoError(t, err)
	return func(node string) fencing.Fence {
		ctx := testutil.Ctx(t, 10*time.Second)
		l, err := w.Ownership.Seize(ctx, u.Name, node, 30*time.Second, true)
		if errors.Is(err, ownership.ErrFree) {
			l, err = w.Ownership.Claim(ctx, u.Name, node, 30*time.Second)
		}
		require.NoError(t, err)
		return l.Fence
	}
}

// TestRemind_Fenced: a holder sets a reminder for its own id, fenced by
// its holding: its intent is written fenced on the record, scheduled, and
// deleted. A seized holder's reminder is not stored, neither its intent
// nor a schedule (and the one it set while it held stays as it was), even
// when it was seized right before its write and stopped right after; one
// whose intent was stored before the seizure is a committed fact and is
// scheduled; a fence of another id is refused; the holder's reminder
// fires. Per-id and sharded worlds, one node and R3.
func TestRemind_Fenced(t *testing.T) {
	for _, tg := range testutil.Targets() {
		t.Run(tg.Name, func(t *testing.T) {
			env := testutil.Start(t, tg)
			for _, shards := range []int{0, 4} {
				t.Run(map[int]string{0: "per-id", 4: "sharded"}[shards], func(t *testing.T) {
					testRemindFenced(t, env, shards)
				})
			}
		})
	}
}

func testRemindFenced(t *testing.T, env *testutil.Env, shards int) {
	ctx := testutil.Ctx(t, time.Minute)
	w := env.World(t, world.Config{Shards: shards})
	hold := holder(t, w, "a")
	at := queue.WithAfter(time.Hour)
	f1 := hold("n1")
	_, err := w.Queue.Remind(ctx, f1, "a", []byte("r1"), at, queue.WithTimerKey("r"))
	require.NoError(t, err)
	m := timerOn(t, w, "a", "r")
	require.Equal(t, "r1", string(m.Data))
	require.NotEmpty(t, m.Header.Get(wire.HeaderReminderRev), "the schedule names its intent")
	require.Nil(t, intentOn(t, w, "a", "r"), "the intent is deleted once scheduled")

	// Not the fence's id; no key; no time.
	_, err = w.Queue.Remind(ctx, f1, otherUnit(t, w, "a"), []byte("x"), at, queue.WithTimerKey("r"))
	require.ErrorIs(t, err, queue.ErrInvalidTimer)
	_, err = w.Queue.Remind(ctx, f1, "a", []byte("x"), at)
	require.ErrorIs(t, err, queue.ErrInvalidTimer)
	_, err = w.Queue.Remind(ctx, f1, "a", []byte("x"), queue.WithTimerKey("r"))
	require.ErrorIs(t, err, queue.ErrInvalidTimer)

	// Seized: the stale holder's reminder is not stored.
	f2 := hold("n2")
	for _, key := range []string{"r", "s"} {
		_, err = w.Queue.Remind(ctx, f1, "a", []byte("stale"), queue.WithAfter(time.Second), queue.WithTimerKey(key))
		require.ErrorIs(t, err, queue.ErrReminderFenced)
		var fe *queue.ReminderFencedError
		require.ErrorAs(t, err, &fe)
		require.False(t, fe.Stored)
		require.Nil(t, intentOn(t, w, "a", key), "no intent")
	}
	require.Equal(t, "r1", string(timerOn(t, w, "a", "r").Data), "the reminder set while it held is as it was")
	require.Nil(t, timerOn(t, w, "a", "s"), "nothing stored")

	// Seized right before its write, and stopped right after it: nothing
	// is stored, ever (the earlier design stored the schedule here and
	// left it, the undo never running).
	f3 := f2
	undoW := queue.SetRemindWrite(func() { f3 = hold("n3") })
	undoI := queue.SetRemindIntent(func() bool { return true })
	_, err = w.Queue.Remind(ctx, f2, "a", []byte("late"), queue.WithAfter(time.Second), queue.WithTimerKey("u"))
	undoW()
	undoI()
	require.ErrorIs(t, err, queue.ErrReminderFenced)
	require.Nil(t, intentOn(t, w, "a", "u"), "no intent")
	require.Nil(t, timerOn(t, w, "a", "u"), "no schedule")

	// Seized after its intent was stored: the intent was stored while it
	// held, a committed fact, and is scheduled.
	undoI = queue.SetRemindIntent(func() bool { hold("n4"); return false })
	p, err := w.Queue.Remind(ctx, f3, "a", []byte("mid"), queue.WithAfter(time.Hour), queue.WithTimerKey("r"))
	undoI()
	require.NoError(t, err)
	m = timerOn(t, w, "a", "r")
	require.Equal(t, "mid", string(m.Data))
	require.Equal(t, p.Seq, m.Sequence)
	require.Nil(t, intentOn(t, w, "a", "r"))

	// The holder's own reminder fires, once.
	f5 := hold("n5")
	p, err = w.Queue.Remind(ctx, f5, "a", []byte("fires"), queue.WithAfter(time.Second), queue.WithTimerKey("f"), queue.WithHeader("X-A", "1"), queue.WithFrom("me"))
	require.NoError(t, err)
	m, _ = waitFired(t, w, "a", p.At)
	require.Equal(t, "fires", string(m.Data))
	require.Equal(t, "1", m.Header.Get("X-A"))
	require.Equal(t, "me", m.Header.Get(queue.HeaderFrom))
}

// TestRemind_NewerStands: a holder's intent materialised late, after the
// next holder's reminder of the same key, changes nothing: the newer
// schedule stands while it is pending, and once it fired, the older one
// does not fire after it. An intent materialised twice (its first
// materialisation stopped before it deleted the intent) is scheduled once.
func TestRemind_NewerStands(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	// A short dedupe window: a schedule written twice is not taken for a
	// duplicate of the first.
	w := env.World(t, world.Config{DedupeWindow: 100 * time.Millisecond}) // the timer stream takes no less
	ctx := testutil.Ctx(t, time.Minute)
	hold := holder(t, w, "a")
	stop := queue.SetRemindIntent(func() bool { return true })
	defer stop()

	// remindStopped is a reminder whose holder stopped after its intent:
	// the intent's revision and value, as fencepostd would find them.
	remindStopped := func(f fencing.Fence, key, body string, after time.Duration) (uint64, []byte) {
		_, err := w.Queue.Remind(ctx, f, "a", []byte(body), queue.WithAfter(after), queue.WithTimerKey(key))
		require.NoError(t, err)
		in := intentOn(t, w, "a", key)
		require.NotNil(t, in)
		require.Nil(t, timerOn(t, w, "a", key), "not scheduled yet")
		return in.Sequence, in.Data
	}
	materialise := func(key string, rev uint64, v []byte) queue.Posted {
		p, err := w.Queue.MaterialiseReminder(ctx, wire.ReminderKey("a", key), rev, v)
		require.NoError(t, err)
		return p
	}

	// Pending: the newer schedule stands.
	oldRev, oldV := remindStopped(hold("n1"), "k", "old", time.Hour)
	newRev, newV := remindStopped(hold("n2"), "k", "new", time.Hour)
	require.Greater(t, newRev, oldRev)
	materialise("k", newRev, newV)
	require.Equal(t, "new", string(timerOn(t, w, "a", "k").Data))
	p := materialise("k", oldRev, oldV)
	require.Zero(t, p.Seq, "nothing written")
	require.Equal(t, "new", string(timerOn(t, w, "a", "k").Data))
	p = materialise("k", newRev, newV)
	require.Zero(t, p.Seq, "materialised once")

	// Stopped between its schedule and its delete: materialised again (by
	// fencepostd), it writes nothing and deletes the intent.
	rev, v := remindStopped(hold("n5"), "d", "once", time.Hour)
	undo := queue.SetRemindScheduled(func() bool { return true })
	p = materialise("d", rev, v)
	undo()
	require.NotNil(t, intentOn(t, w, "a", "d"), "left")
	time.Sleep(150 * time.Millisecond) // past the dedupe window
	again := materialise("d", rev, v)
	require.Equal(t, p.Seq, again.Seq, "the schedule found, not written again")
	require.False(t, again.Duplicate)
	require.Equal(t, p.Seq, timerOn(t, w, "a", "d").Sequence)
	require.Nil(t, intentOn(t, w, "a", "d"), "deleted")

	// Fired: the older one does not fire after it.
	oldRev, oldV = remindStopped(hold("n3"), "g", "old", 500*time.Millisecond)
	newRev, newV = remindStopped(hold("n4"), "g", "new", 200*time.Millisecond)
	np := materialise("g", newRev, newV)
	m, _ := waitFired(t, w, "a", np.At)
	require.Equal(t, "new", string(m.Data))
	testutil.WaitFor(t, 10*time.Second, "the schedule left its subject", func() bool { return timerOn(t, w, "a", "g") == nil })
	materialise("g", oldRev, oldV)
	require.Nil(t, timerOn(t, w, "a", "g"), "nothing scheduled")
	time.Sleep(time.Second) // past the old reminder's time: it would have fired
	require.Equal(t, m.Sequence, storedMsg(t, w, "a").Sequence, "nothing fired after the newer one")
}

// TestRemind_LeftoverFiredByDaemon: a holder that stops between its
// intent and its schedule leaves a committed intent, which fencepostd
// schedules after its grace: it fires once, and not before its time.
func TestRemind_LeftoverFiredByDaemon(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{})
	startFencepostd(t, env.URL, w.Name)
	ctx := testutil.Ctx(t, time.Minute)
	f := holder(t, w, "a")("n1")
	stop := queue.SetRemindIntent(func() bool { return true })
	p, err := w.Queue.Remind(ctx, f, "a", []byte("left"), queue.WithAfter(3*time.Second), queue.WithTimerKey("k"))
	stop()
	require.NoError(t, err)
	require.NotNil(t, intentOn(t, w, "a", "k"))
	require.Nil(t, timerOn(t, w, "a", "k"))
	m, _ := waitFired(t, w, "a", p.At)
	require.Equal(t, "left", string(m.Data))
	require.Nil(t, intentOn(t, w, "a", "k"), "the intent is gone once scheduled")
	time.Sleep(3 * time.Second) // fencepostd's grace and retry passed again: no second fire
	require.Equal(t, 1, mailboxCount(t, w, "a"), "fired once")
}

// startFencepostd runs fencepostd on the server at url, following world
// name, until the test ends.
func startFencepostd(t *testing.T, url, name string) {
	t.Helper()
	cfg, err := daemon.Parse([]string{"--nats", url, "--world", name, "--http", "127.0.0.1:0", "--data", t.TempDir(), "--log-level", "warn"}, io.Discard)
	require.NoError(t, err)
	d, err := daemon.Start(cfg, daemon.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(30 * time.Second):
			t.Error("fencepostd did not stop")
		}
	})
}

// mailboxCount is how many messages id's mailbox holds.
func mailboxCount(t *testing.T, w *client.World, id string) int {
	t.Helper()
	b, err := jsapi.DirectGet(testutil.Ctx(t, 5*time.Second), handles.Of(w).JS.Conn(), wire.MailboxStream(w.Name), jsapi.GetRequest{Seq: 1, NextFor: wire.MailboxSubject(w.Name, id), Batch: 100})
	require.NoError(t, err)
	return len(b.Msgs)
}

// otherUnit is an id whose ownership unit is not id's.
func otherUnit(t *testing.T, w *client.World, id string) string {
	u, err := w.Unit(id)
	require.NoError(t, err)
	for _, o := range []string{"b", "c", "d", "e", "f", "g", "h"} {
		if ou, err := w.Unit(o); err == nil && ou.Name != u.Name {
			return o
		}
	}
	t.Fatal("no id of another unit")
	return ""
}
