package queue_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
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

// TestRemind_Fenced: a holder sets a reminder for its own id, fenced by
// its holding. A seized holder's reminder is not stored (and the one it
// set while it held stays as it was); one seized between the store and
// the second check is undone (the schedule there before is written back,
// or none is left); a fence of another id is refused; the holder's
// reminder fires. Per-id and sharded worlds, one node and R3.
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
	u, err := w.Unit("a")
	require.NoError(t, err)
	hold := func(node string) fencing.Fence {
		l, err := w.Ownership.Seize(ctx, u.Name, node, 30*time.Second, true)
		if errors.Is(err, ownership.ErrFree) {
			l, err = w.Ownership.Claim(ctx, u.Name, node, 30*time.Second)
		}
		require.NoError(t, err)
		return l.Fence
	}
	at := queue.WithAfter(time.Hour)
	f1 := hold("n1")
	p1, err := w.Queue.Remind(ctx, f1, "a", []byte("r1"), at, queue.WithTimerKey("r"))
	require.NoError(t, err)
	require.Equal(t, "r1", string(timerOn(t, w, "a", "r").Data))

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
		require.False(t, fe.Stored, "refused at the first check")
	}
	require.Equal(t, "r1", string(timerOn(t, w, "a", "r").Data), "the reminder set while it held is as it was")
	require.Nil(t, timerOn(t, w, "a", "s"), "nothing stored")

	// Seized between the store and the second check: undone.
	var f3 fencing.Fence
	undo := queue.SetRemindStored(func() { f3 = hold("n3") })
	_, err = w.Queue.Remind(ctx, f2, "a", []byte("mid"), queue.WithAfter(time.Second), queue.WithTimerKey("r"))
	undo()
	var fe *queue.ReminderFencedError
	require.ErrorAs(t, err, &fe)
	require.True(t, fe.Stored && fe.Revoked, "%v", err)
	m := timerOn(t, w, "a", "r")
	require.Equal(t, "r1", string(m.Data), "the schedule there before is written back")
	require.Equal(t, p1.At.UTC().Format(time.RFC3339Nano), m.Header.Get(wire.HeaderSchedule)[len("@at "):], "with its time")

	undo = queue.SetRemindStored(func() { hold("n4") })
	midAt := time.Now().Add(time.Second)
	p, err := w.Queue.Remind(ctx, f3, "a", []byte("mid"), queue.WithAfter(time.Second), queue.WithTimerKey("t"))
	undo()
	require.ErrorAs(t, err, &fe)
	require.True(t, fe.Stored && fe.Revoked, "%v", err)
	require.Empty(t, p.Key)
	m = timerOn(t, w, "a", "t")
	require.NotNil(t, m)
	require.Empty(t, m.Header.Get(wire.HeaderSchedule), "a marker, no schedule")
	testutil.WaitFor(t, 10*time.Second, "the marker expired, and the undone reminders' time is 1.5 s past", func() bool {
		return timerOn(t, w, "a", "t") == nil && time.Since(midAt) > 1500*time.Millisecond
	})
	require.Nil(t, storedMsg(t, w, "a"), "the undone reminder never fired")

	// The holder's own reminder fires.
	f5 := hold("n5")
	p, err = w.Queue.Remind(ctx, f5, "a", []byte("fires"), queue.WithAfter(time.Second), queue.WithTimerKey("f"))
	require.NoError(t, err)
	m, _ = waitFired(t, w, "a", p.At)
	require.Equal(t, "fires", string(m.Data))
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
