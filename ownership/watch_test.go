package ownership_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// next reads the next event with a deadline.
func next(t *testing.T, ch <-chan ownership.Event) ownership.Event {
	t.Helper()
	select {
	case ev, ok := <-ch:
		require.True(t, ok, "the watch channel closed")
		return ev
	case <-time.After(5 * time.Second):
		t.Fatal("no event within 5s")
		return ownership.Event{}
	}
}

func expect(t *testing.T, ch <-chan ownership.Event, kind ownership.EventKind, id, node string) ownership.Event {
	t.Helper()
	ev := next(t, ch)
	require.Equal(t, kind, ev.Kind, "event %+v", ev)
	require.Equal(t, id, ev.ID, "event %+v", ev)
	require.Equal(t, node, ev.Node, "event %+v", ev)
	return ev
}

// watch starts a watch: it reports every change written after it returns.
func watch(t *testing.T, ctx context.Context, w *client.World, id string) <-chan ownership.Event {
	t.Helper()
	ch, err := w.Ownership.Watch(ctx, id)
	require.NoError(t, err)
	return ch
}

func TestWatch_OneID(t *testing.T) {
	suite(t, func(t *testing.T, _ *testutil.Env, w *client.World) {
		ctx := testutil.Ctx(t, time.Minute)
		s := w.Ownership
		// An existing record is part of the snapshot, not reported.
		_, err := s.Claim(ctx, "x", "old", time.Minute)
		require.NoError(t, err)
		require.NoError(t, s.Release(ctx, "x", "old"))
		wctx, cancel := context.WithCancel(ctx)
		ch := watch(t, wctx, w, "x")

		l, err := s.Claim(ctx, "x", "a", 200*time.Millisecond)
		require.NoError(t, err)
		ev := expect(t, ch, ownership.EventClaimed, "x", "a")
		require.Equal(t, l.Epoch, ev.Epoch)
		require.Equal(t, l.Revision, ev.Revision)
		_, err = s.Claim(ctx, "other", "a", time.Minute) // another id: not reported
		require.NoError(t, err)
		r, err := s.Renew(ctx, "x", "a", 200*time.Millisecond)
		require.NoError(t, err)
		ev = expect(t, ch, ownership.EventRenewed, "x", "a")
		require.True(t, r.Expires.Equal(ev.Expires))
		ev = expect(t, ch, ownership.EventLapsed, "x", "a")
		require.True(t, ev.At.Equal(r.Expires))
		require.False(t, time.Now().Before(r.Expires), "lapsed reported before the expiry")
		l2, err := s.Claim(ctx, "x", "b", time.Minute)
		require.NoError(t, err)
		ev = expect(t, ch, ownership.EventClaimed, "x", "b")
		require.Equal(t, l2.Epoch, ev.Epoch)
		_, err = s.Seize(ctx, "x", "c", time.Minute, true)
		require.NoError(t, err)
		expect(t, ch, ownership.EventSeized, "x", "c")
		require.NoError(t, s.Release(ctx, "x", "c"))
		expect(t, ch, ownership.EventReleased, "x", "c")
		_, err = s.Claim(ctx, "x", "d", time.Minute)
		require.NoError(t, err)
		expect(t, ch, ownership.EventClaimed, "x", "d")
		require.NoError(t, handles.Of(w).KV.Delete(ctx, wire.RecordKey("x")))
		expect(t, ch, ownership.EventDeleted, "x", "d")

		cancel()
		testutil.WaitFor(t, 5*time.Second, "the channel closes on cancel", func() bool {
			select {
			case _, ok := <-ch:
				return !ok
			default:
				return false
			}
		})
	})
}

func TestWatch_World_NodeLease(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{})
	ctx := testutil.Ctx(t, time.Minute)
	s := w.Ownership
	ch := watch(t, ctx, w, "")

	const ttl = 600 * time.Millisecond
	ss, err := s.OpenSession(ctx, "n", ttl)
	require.NoError(t, err)
	defer ss.Orphan()
	for _, id := range []string{"a", "b"} {
		_, err := ss.Claim(ctx, id)
		require.NoError(t, err)
		ev := expect(t, ch, ownership.EventClaimed, id, "n")
		require.Equal(t, ss.Epoch(), ev.NodeLease)
	}
	// Node lease renewals renew the ids silently; its lapse lapses both.
	testutil.WaitFor(t, 5*time.Second, "2 renewals", func() bool { return ss.Renewals() >= 2 })
	require.NoError(t, ss.Orphan())
	got := map[string]ownership.EventKind{}
	for range 2 {
		ev := next(t, ch)
		got[ev.ID] = ev.Kind
	}
	require.Equal(t, map[string]ownership.EventKind{"a": ownership.EventLapsed, "b": ownership.EventLapsed}, got)

	// A new session; ending it releases both at once.
	ss2, err := s.OpenSession(ctx, "n", time.Minute)
	require.NoError(t, err)
	for _, id := range []string{"a", "b"} {
		_, err := ss2.Claim(ctx, id)
		require.NoError(t, err)
		expect(t, ch, ownership.EventClaimed, id, "n")
	}
	require.NoError(t, ss2.CloseContext(ctx))
	got = map[string]ownership.EventKind{}
	for range 2 {
		ev := next(t, ch)
		got[ev.ID] = ev.Kind
	}
	require.Equal(t, map[string]ownership.EventKind{"a": ownership.EventReleased, "b": ownership.EventReleased}, got)
}

// TestWatch_Reset: a world reset purges the bucket, which leaves no marker
// per key; watchers of the world and of one id still see each record go
// (deleted), and what is claimed after the reset as new.
func TestWatch_Reset(t *testing.T) {
	suite(t, func(t *testing.T, _ *testutil.Env, w *client.World) {
		ctx := testutil.Ctx(t, time.Minute)
		s := w.Ownership
		_, err := s.Claim(ctx, "a", "n1", time.Minute)
		require.NoError(t, err)
		_, err = s.Claim(ctx, "b", "n2", time.Minute)
		require.NoError(t, err)
		all := watch(t, ctx, w, "")
		one := watch(t, ctx, w, "b")
		require.NoError(t, world.Reset(ctx, handles.Of(w).JS, w.Name))
		expect(t, all, ownership.EventDeleted, "a", "n1")
		expect(t, all, ownership.EventDeleted, "b", "n2")
		expect(t, one, ownership.EventDeleted, "b", "n2")
		_, err = s.Claim(ctx, "b", "n3", time.Minute)
		require.NoError(t, err)
		ev := expect(t, all, ownership.EventClaimed, "b", "n3")
		require.Equal(t, uint64(1), ev.Epoch, "epochs start again after a reset")
		expect(t, one, ownership.EventClaimed, "b", "n3")
	})
}
