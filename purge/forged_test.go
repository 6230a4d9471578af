package purge_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/purge"
	"github.com/fencepost/fencepost/server/servertest"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// refusals counts what a purger refused, by reason.
type refusals struct{ badKeys, forged atomic.Int64 }

func (r *refusals) option() purge.PurgeOption {
	return purge.OnRefusal(func(why purge.Refusal) {
		switch why {
		case purge.RefusedBadKey:
			r.badKeys.Add(1)
		case purge.RefusedForged:
			r.forged.Add(1)
		}
	})
}

// runPurger runs w's purger until the test ends.
func runPurger(t *testing.T, ctx context.Context, w *client.World, opts ...purge.PurgeOption) {
	t.Helper()
	p := newPurger(t, w)
	pctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.PurgeCommitted(pctx, opts...) }()
	t.Cleanup(func() {
		stop()
		require.NoError(t, <-done)
	})
}

// cursorOf reads id's stored cursor: its seq, or -1 when absent or deleted.
func cursorOf(t *testing.T, ctx context.Context, w *client.World, id string) int64 {
	t.Helper()
	e, err := handles.Of(w).KV.Get(ctx, wire.CursorKey(id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return -1
	}
	require.NoError(t, err)
	c, err := wire.DecodeCursor(e.Value())
	require.NoError(t, err)
	return int64(c.Seq)
}

func mailboxLastSeq(t *testing.T, ctx context.Context, w *client.World) uint64 {
	t.Helper()
	info, err := handles.Of(w).Mailbox.Info(ctx)
	require.NoError(t, err)
	return info.State.LastSeq
}

// TestPurger_WildcardCursorKey: a raw publish to $KV.fp_<world>.c.* (a
// literal '*', which the owner role's c.> permission allows) is refused:
// its token names no id, so the purger does not purge fp.<world>.mb.*,
// which would empty every mailbox of the world. Genuine cursors are still
// followed.
func TestPurger_WildcardCursorKey(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	ctx := testutil.Ctx(t, 30*time.Second)
	w, d := newWorld(t, env, world.Config{Purge: world.PurgeByServer})
	a, b := wire.MailboxSubject(w.Name, "a"), wire.MailboxSubject(w.Name, "b")
	for i := range 5 {
		send(t, ctx, w, "a", fmt.Sprint(i))
		send(t, ctx, w, "b", fmt.Sprint(i))
	}
	_, err := handles.Of(w).JS.Publish(ctx, wire.KeySubject(w.Name, wire.CursorPrefix+"*"), []byte(`{"v":1,"seq":1000000}`))
	require.NoError(t, err)
	// A genuine commit after the forged key: once the purger followed it,
	// it has seen the forged key too (the watch delivers in stream order).
	la, err := w.Ownership.Claim(ctx, "a", "n1", time.Minute)
	require.NoError(t, err)
	rec := &testutil.Recorder{}
	_, err = d.DrainLease(ctx, la, rec.Handle, drain.WithMax(2))
	require.NoError(t, err)

	var r refusals
	runPurger(t, ctx, w, r.option())
	servertest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		n, m := stored(t, w, a), stored(t, w, b)
		if bad := r.badKeys.Load(); bad != 1 || n != 3 || m != 5 {
			return fmt.Errorf("bad keys %d (want 1), stored a=%d (want 3: 2 committed), b=%d (want 5)", bad, n, m)
		}
		return nil
	})
	require.Zero(t, r.forged.Load())
}

// TestPurger_ForgedCursor: a cursor above the mailbox stream's last
// sequence, which no commit writes, is refused: nothing is purged for it,
// and the key is repaired, back to the last cursor the purger saw (a) or
// deleted when it saw none (b), so that messages posted afterwards are
// delivered and none is lost.
func TestPurger_ForgedCursor(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	ctx := testutil.Ctx(t, 30*time.Second)
	w, d := newWorld(t, env, world.Config{Purge: world.PurgeByServer})
	a, b := wire.MailboxSubject(w.Name, "a"), wire.MailboxSubject(w.Name, "b")
	for i := range 5 {
		send(t, ctx, w, "a", "a"+fmt.Sprint(i))
		send(t, ctx, w, "b", "b"+fmt.Sprint(i))
	}
	la, err := w.Ownership.Claim(ctx, "a", "n1", time.Minute)
	require.NoError(t, err)
	lb, err := w.Ownership.Claim(ctx, "b", "n1", time.Minute)
	require.NoError(t, err)
	rec := &testutil.Recorder{}
	_, err = d.DrainLease(ctx, la, rec.Handle, drain.WithMax(2))
	require.NoError(t, err)
	genuine := cursorOf(t, ctx, w, "a")
	require.Positive(t, genuine)

	var r refusals
	runPurger(t, ctx, w, r.option())
	servertest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if n := stored(t, w, a); n != 3 {
			return fmt.Errorf("stored a=%d, want 3 (2 committed)", n)
		}
		return nil
	})

	forged := mailboxLastSeq(t, ctx, w) + 1000
	for _, id := range []string{"a", "b"} {
		_, err := handles.Of(w).JS.Publish(ctx, wire.KeySubject(w.Name, wire.CursorKey(id)), []byte(`{"v":1,"seq":`+strconv.FormatUint(forged, 10)+`}`))
		require.NoError(t, err)
	}
	servertest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		f, ca, cb := r.forged.Load(), cursorOf(t, ctx, w, "a"), cursorOf(t, ctx, w, "b")
		n, m := stored(t, w, a), stored(t, w, b)
		if f != 2 || ca != genuine || cb != -1 || n != 3 || m != 5 {
			return fmt.Errorf("forged %d (want 2), cursor a=%d (want %d restored), b=%d (want -1: deleted), stored a=%d (want 3), b=%d (want 5)",
				f, ca, genuine, cb, n, m)
		}
		return nil
	})
	require.Zero(t, r.badKeys.Load())

	// Posts after the forgery are delivered, and so is everything that was
	// not committed: nothing lost.
	send(t, ctx, w, "a", "a-after")
	send(t, ctx, w, "b", "b-after")
	_, err = d.DrainLease(ctx, la, rec.Handle)
	require.NoError(t, err)
	_, err = d.DrainLease(ctx, lb, rec.Handle)
	require.NoError(t, err)
	require.Equal(t, []string{"a0", "a1", "a2", "a3", "a4", "a-after", "b0", "b1", "b2", "b3", "b4", "b-after"}, rec.Bodies())
	servertest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if n, m := stored(t, w, a), stored(t, w, b); n != 0 || m != 0 {
			return fmt.Errorf("stored a=%d b=%d, want 0 (all committed, purged by the purger)", n, m)
		}
		return nil
	})
}
