package drain_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// stopped waits (at most 10 s) for a handler's context to end and returns
// when, or the zero time if it did not.
func stopped(t *testing.T, ctx context.Context) time.Time {
	t.Helper()
	select {
	case <-ctx.Done():
		return time.Now()
	case <-time.After(10 * time.Second):
		t.Error("the handler's context did not end")
		return time.Time{}
	}
}

// requireLost checks that err is the drain's lost lock.
func requireLost(t *testing.T, err error) {
	t.Helper()
	var ce *drain.ContendedError
	require.ErrorAs(t, err, &ce, "got %v", err)
	require.True(t, ce.Lost, "got %v", err)
}

// overwriteLock puts another drain's lock on id, as a takeover would.
func overwriteLock(t *testing.T, ctx context.Context, w *client.World, id string) {
	t.Helper()
	other, err := wire.EncodeLock(wire.Lock{Token: "other-drain", Node: "n9", Epoch: 1, Expires: time.Now().Add(time.Minute)})
	require.NoError(t, err)
	_, err = handles.Of(w).KV.Put(ctx, wire.LockKey(id), other)
	require.NoError(t, err)
}

// TestDrain_LockKeptByTerm: the drain lock is kept by ownership.Term, the
// engine of id and node leases (docs/design.md 3.5, 4.1), with its
// self-fence: the drain stops, with its handler's context, when a renewal
// finds the lock changed hands, when no renewal is confirmed within the
// lock's authority (the watchdog: before the Term, a lock whose renewals
// went unanswered kept delivering until its next commit), and when the
// renewal a re-read fence needs before a commit fails.
func TestDrain_LockKeptByTerm(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])

	t.Run("a lock that changed hands stops the drain at the next renewal", func(t *testing.T) {
		ctx := testutil.Ctx(t, time.Minute)
		w, d := newWorld(t, env, world.Config{}, drain.WithLockTTL(600*time.Millisecond))
		send(t, ctx, w, "a", "m1", "m2")
		lease, err := w.Ownership.Claim(ctx, "a", "n1", time.Minute)
		require.NoError(t, err)
		calls := 0
		_, err = d.DrainLease(ctx, lease, func(hctx context.Context, m drain.Message) error {
			calls++
			overwriteLock(t, ctx, w, "a")
			stopped(t, hctx)
			requireLost(t, context.Cause(hctx))
			return hctx.Err()
		})
		requireLost(t, err)
		require.Equal(t, 1, calls)
		st, err := w.Mailboxes.Stat(ctx, "a")
		require.NoError(t, err)
		require.Zero(t, st.Cursor, "a drain that lost its lock committed")
		e, err := handles.Of(w).KV.Get(ctx, wire.LockKey("a"))
		require.NoError(t, err, "the other drain's lock was removed")
		l, err := wire.DecodeLock(e.Value())
		require.NoError(t, err)
		require.Equal(t, "other-drain", l.Token)
	})

	t.Run("a lock whose renewals go unanswered stops the drain at its authority", func(t *testing.T) {
		ctx := testutil.Ctx(t, time.Minute)
		const ttl, skew = 400 * time.Millisecond, 50 * time.Millisecond
		w, d := newWorld(t, env, world.Config{}, drain.WithLockTTL(ttl), drain.WithClockSkew(skew))
		drain.PauseLockRenewal(d)
		send(t, ctx, w, "a", "m1")
		lease, err := w.Ownership.Claim(ctx, "a", "n1", time.Minute)
		require.NoError(t, err)
		begun := time.Now()
		var at time.Time
		_, err = d.DrainLease(ctx, lease, func(hctx context.Context, m drain.Message) error {
			at = stopped(t, hctx)
			requireLost(t, context.Cause(hctx))
			return hctx.Err()
		})
		requireLost(t, err)
		// The lock was written after begun: its authority, term less the
		// clock margin, cannot have run out earlier.
		require.GreaterOrEqual(t, at.Sub(begun), ttl-skew-time.Millisecond, "stopped before the lock's authority ran out")
		st, err := w.Mailboxes.Stat(ctx, "a")
		require.NoError(t, err)
		require.Zero(t, st.Cursor)
		require.Equal(t, uint64(1), st.Depth)
		// Nobody took the lock: its handler was stopped mid-call, so it is
		// written lapsed at the revision this drain wrote, and the next
		// drain does not wait for its term; it labels m1 maybe seen.
		e, err := handles.Of(w).KV.Get(ctx, wire.LockKey("a"))
		require.NoError(t, err)
		l, err := wire.DecodeLock(e.Value())
		require.NoError(t, err)
		require.True(t, l.Expires.Before(time.Now().Add(-skew)), "the lock was left to lapse for its term: %v", l.Expires)
		drain.ResumeLockRenewal(d)
		var rec testutil.Recorder
		_, err = d.DrainLease(ctx, lease, rec.Handle)
		require.NoError(t, err)
		require.Len(t, rec.Msgs(), 1)
		require.True(t, rec.Msgs()[0].Redelivered)
	})

	t.Run("a commit on a re-read fence renews the lock first, and stops if it changed hands", func(t *testing.T) {
		ctx := testutil.Ctx(t, time.Minute)
		w, d := newWorld(t, env, world.Config{}) // a 30 s lock: no scheduled renewal meanwhile
		send(t, ctx, w, "a", "m1")
		lease, err := w.Ownership.Claim(ctx, "a", "n1", time.Minute)
		require.NoError(t, err)
		// Between the handler and the commit: the record moves (the fence
		// the drain holds is refused) after another drain took the lock, in
		// the order a takeover writes them (design.md 3.5, T1 and T2).
		drain.SetBeforeCommit(d, func(id string, _ wire.Cursor) {
			overwriteLock(t, ctx, w, id)
			_, err := w.Ownership.Renew(ctx, id, "n1", time.Minute)
			require.NoError(t, err)
		})
		var rec testutil.Recorder
		_, err = d.DrainLease(ctx, lease, rec.Handle)
		requireLost(t, err)
		require.Equal(t, []string{"m1"}, rec.Bodies())
		st, err := w.Mailboxes.Stat(ctx, "a")
		require.NoError(t, err)
		require.Zero(t, st.Cursor, "committed on a fence read after the lock changed hands")
	})
}

// TestDrain_OverlongLockTakenOver: a drain lock whose term lies beyond the
// world's max ttl (plus ownership.MaxTermSlack) was written by no drain
// (an owner writing the bucket directly planted it with the holder's own
// epoch, to make every drain of the id answer contended until 2027): the
// holder's drain takes it over as a lapsed one. A lock within the bound
// still makes a second drain contended.
func TestDrain_OverlongLockTakenOver(t *testing.T) {
	env := testutil.Start(t, testutil.Target{Name: "single"})
	ctx := testutil.Ctx(t, time.Minute)
	w := env.World(t, world.Config{MaxTTL: time.Minute})
	d, err := drain.New(w.World, w.Ownership)
	require.NoError(t, err)
	l, err := w.Ownership.Claim(ctx, "x", "n1", 30*time.Second)
	require.NoError(t, err)
	_, err = w.Queue.Send(ctx, "x", []byte("m"))
	require.NoError(t, err)
	plant := func(expires time.Time) {
		lock, err := wire.EncodeLock(wire.Lock{Token: "planted", Node: "n1", Epoch: l.Epoch, Expires: expires})
		require.NoError(t, err)
		_, err = handles.Of(w).KV.Put(ctx, wire.LockKey("x"), lock)
		require.NoError(t, err)
	}

	// Within the bound: contended, nothing delivered.
	plant(time.Now().Add(time.Minute))
	_, err = d.DrainLease(ctx, l, func(context.Context, drain.Message) error { return nil })
	require.ErrorIs(t, err, drain.ErrContended)

	// Beyond it: taken over, the message delivered.
	plant(time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC))
	var got int
	res, err := d.DrainLease(ctx, l, func(context.Context, drain.Message) error { got++; return nil })
	require.NoError(t, err)
	require.Equal(t, 1, res.Count)
	require.Equal(t, 1, got)
}
