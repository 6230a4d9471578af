package drain_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// labels is each recorded message's body and Redelivered flag.
func labels(r *testutil.Recorder) map[string]bool {
	out := map[string]bool{}
	for _, m := range r.Msgs() {
		out[string(m.Body)] = m.Redelivered
	}
	return out
}

// TestRedelivered_WithinHolding: a holding's commit refused by the server
// leaves its outcome unknown to the holding, which reads the cursor again
// and hands the same messages out again: labelled maybe seen (Delivery is
// still 1: no handler failed). A first delivery is not labelled.
func TestRedelivered_WithinHolding(t *testing.T) {
	var once sync.Once
	ctx, w, d, ss, _, h := holdX(t)
	defer ss.Close()
	// The bucket stream refuses the next cursor write (a message larger
	// than it takes), then takes writes again.
	bucket := wire.BucketStream(w.Name)
	setMax := func(n int32) {
		s, err := handles.Of(w).JS.Stream(ctx, bucket)
		require.NoError(t, err)
		cfg := s.CachedInfo().Config
		cfg.MaxMsgSize = n
		_, err = handles.Of(w).JS.UpdateStream(ctx, cfg)
		require.NoError(t, err)
	}
	send(t, ctx, w, "x", "a", "b")
	msgs := mailboxMsgs(t, ctx, w, "x", 0)
	var first testutil.Recorder
	drain.SetBeforeCommit(d, func(string, wire.Cursor) { once.Do(func() { setMax(8) }) })
	_, err := h.Start(ctx, msgs, first.Handle)
	require.NoError(t, err)
	err = h.Flush(ctx)
	require.Error(t, err, "the cursor write was refused")
	require.True(t, errors.Is(err, drain.ErrUnknown), "%v", err)
	setMax(-1)
	require.Equal(t, map[string]bool{"a": false, "b": false}, labels(&first), "first deliveries")

	send(t, ctx, w, "x", "c")
	var again testutil.Recorder
	_, err = h.Drain(ctx, again.Handle)
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b", "c"}, again.Bodies())
	require.Equal(t, map[string]bool{"a": true, "b": true, "c": false}, labels(&again), "handed out before by this holding")
	for _, m := range again.Msgs() {
		require.Equal(t, 1, m.Delivery, "%s: no failed delivery is known", m.Body)
	}
}

// TestRedelivered_LockPath: on the drain lock's path (DrainLease, Drain) a
// handler stopped mid-call leaves the lock lapsed, so that the next drain
// takes it over at once and labels what it hands out; a failed delivery is
// labelled too (Delivery 2); a message stored after the takeover, and
// every message of a drain that found no lock, is not.
func TestRedelivered_LockPath(t *testing.T) {
	env := testutil.Start(t, testutil.Target{Name: "single"})
	ctx := testutil.Ctx(t, time.Minute)
	w, d := newWorld(t, env, world.Config{}, drain.WithClockSkew(10*time.Millisecond), drain.WithLockTTL(30*time.Second))
	l, err := w.Ownership.Claim(ctx, "x", "n1", time.Minute)
	require.NoError(t, err)
	send(t, ctx, w, "x", "a", "b")

	// The first drain's handler is stopped while it has a.
	var first testutil.Recorder
	dctx, stop := context.WithCancel(ctx)
	_, err = d.DrainLease(dctx, l, func(hctx context.Context, m drain.Message) error {
		_ = first.Handle(hctx, m)
		stop()
		return hctx.Err()
	})
	require.Error(t, err)
	require.Equal(t, map[string]bool{"a": false}, labels(&first), "a first delivery")

	// The next drain does not wait for the lock's 30 s term.
	start := time.Now()
	var rec testutil.Recorder
	fails := 0
	rec.Fail = func(m drain.Message) error {
		if string(m.Body) == "b" && fails == 0 {
			fails++
			return errors.New("not yet")
		}
		return nil
	}
	_, err = d.DrainLease(ctx, l, rec.Handle)
	require.NoError(t, err)
	require.Less(t, time.Since(start), 10*time.Second, "the interrupted drain's lock was left lapsed")
	require.Equal(t, []string{"a", "b", "b"}, rec.Bodies())
	for _, m := range rec.Msgs() {
		require.True(t, m.Redelivered, "%s (delivery %d): stored before the lock was taken over", m.Body, m.Delivery)
	}
	require.Equal(t, 2, rec.Msgs()[2].Delivery)

	// A drain that finds no lock labels nothing that was not seen.
	send(t, ctx, w, "x", "c")
	var clean testutil.Recorder
	_, err = d.DrainLease(ctx, l, clean.Handle)
	require.NoError(t, err)
	require.Equal(t, map[string]bool{"c": false}, labels(&clean))
}

// TestRedelivered_DrainByEpoch: Drain by (node, epoch) does not know how
// the epoch was won: at epoch 1 nobody held the id before, above it an
// earlier holder may have handed out what was stored before the drain.
func TestRedelivered_DrainByEpoch(t *testing.T) {
	env := testutil.Start(t, testutil.Target{Name: "single"})
	ctx := testutil.Ctx(t, time.Minute)
	w, d := newWorld(t, env, world.Config{}, drain.WithClockSkew(10*time.Millisecond))
	l, err := w.Ownership.Claim(ctx, "x", "n1", time.Minute)
	require.NoError(t, err)
	require.EqualValues(t, 1, l.Epoch)
	send(t, ctx, w, "x", "a")
	var rec testutil.Recorder
	_, err = d.Drain(ctx, "x", "n1", 1, rec.Handle)
	require.NoError(t, err)
	require.Equal(t, map[string]bool{"a": false}, labels(&rec), "epoch 1: a first delivery")

	require.NoError(t, w.Ownership.Release(ctx, "x", "n1"))
	send(t, ctx, w, "x", "b")
	l, err = w.Ownership.Claim(ctx, "x", "n2", time.Minute)
	require.NoError(t, err)
	var rec2 testutil.Recorder
	_, err = d.Drain(ctx, "x", "n2", l.Epoch, rec2.Handle)
	require.NoError(t, err)
	require.Equal(t, map[string]bool{"b": true}, labels(&rec2), "epoch 2: maybe seen")
}
