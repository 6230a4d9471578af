package drain_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// TestHolding: a drain through a Holding (an id held through a session)
// writes one cursor per batch and nothing else to the bucket (no drain
// lock), reads the cursor once per holding, delivers in order; every other
// way to drain refuses an id held through a session; a seize fences the
// holding at its next commit, and the new holder gets everything not
// committed.
func TestHolding(t *testing.T) {
	env := testutil.Start(t, testutil.Target{Name: "single"})
	ctx := testutil.Ctx(t, time.Minute)
	w, d := newWorld(t, env, world.Config{})
	ss, err := w.Ownership.OpenSession(ctx, "n1", time.Minute)
	require.NoError(t, err)
	defer ss.Close()
	l, err := ss.Claim(ctx, "x")
	require.NoError(t, err)
	h, err := d.Hold(l)
	require.NoError(t, err)

	send(t, ctx, w, "x", "1", "2", "3")
	before := bucketLastSeq(t, w)
	var rec testutil.Recorder
	res, err := h.Drain(ctx, rec.Handle)
	require.NoError(t, err)
	require.Equal(t, 3, res.Count)
	require.Equal(t, uint64(1), bucketLastSeq(t, w)-before, "one cursor write, no lock writes")
	send(t, ctx, w, "x", "4")
	before = bucketLastSeq(t, w)
	_, err = h.Drain(ctx, rec.Handle)
	require.NoError(t, err)
	require.Equal(t, uint64(1), bucketLastSeq(t, w)-before)
	require.Equal(t, []string{"1", "2", "3", "4"}, rec.Bodies())
	e, err := handles.Of(w).KV.Get(ctx, wire.CursorKey("x"))
	require.NoError(t, err)
	c, err := wire.DecodeCursor(e.Value())
	require.NoError(t, err)
	require.Equal(t, rec.Msgs()[3].Seq, c.Seq)

	// Exclusive: the lock path refuses an id held through a session.
	_, err = d.Drain(ctx, "x", "n1", l.Epoch, rec.Handle)
	var ce *drain.ContendedError
	require.ErrorAs(t, err, &ce)
	require.True(t, ce.Session)
	_, err = d.DrainLease(ctx, l, rec.Handle)
	require.ErrorAs(t, err, &ce)
	own, err := w.Ownership.Claim(ctx, "own", "n3", time.Minute)
	require.NoError(t, err)
	_, err = d.Hold(own)
	require.ErrorIs(t, err, drain.ErrInvalidOption, "a lease of its own is not a holding")

	// A forced seize: the holding's next drain is refused before it
	// hands out anything (invariant 4), and nothing is lost.
	send(t, ctx, w, "x", "5", "6")
	seized, err := w.Ownership.Seize(ctx, "x", "n2", time.Minute, true)
	require.NoError(t, err)
	var stale testutil.Recorder
	_, err = h.Drain(ctx, stale.Handle)
	require.ErrorIs(t, err, ownership.ErrHeld)
	require.Empty(t, stale.Bodies(), "a seized holding received messages")
	var next testutil.Recorder
	res, err = d.DrainLease(ctx, seized, next.Handle)
	require.NoError(t, err)
	require.Equal(t, []string{"5", "6"}, next.Bodies())
	require.Equal(t, 2, res.Count)
}

// TestDrain_CommitsWithinABatch: a drain commits what was acknowledged
// every n messages (or every interval) within a batch, not only at its
// end: a crash in the middle of a long batch hands out again at most
// that much. Here: commit every 2, the handler blocks
// on the 4th message, and the stored cursor already covers the 2nd.
func TestDrain_CommitsWithinABatch(t *testing.T) {
	env := testutil.Start(t, testutil.Target{Name: "single"})
	ctx := testutil.Ctx(t, time.Minute)
	w, d := newWorld(t, env, world.Config{}, drain.WithCommitEvery(2, time.Hour))
	send(t, ctx, w, "x", "1", "2", "3", "4", "5", "6")
	lease, err := w.Ownership.Claim(ctx, "x", "n1", time.Minute)
	require.NoError(t, err)
	reached, release := make(chan uint64), make(chan struct{})
	var seqs []uint64
	done := make(chan error, 1)
	go func() {
		_, err := d.DrainLease(ctx, lease, func(_ context.Context, m drain.Message) error {
			seqs = append(seqs, m.Seq)
			if string(m.Body) == "4" {
				reached <- seqs[1]
				<-release
			}
			return nil
		})
		done <- err
	}()
	second := <-reached
	e, err := handles.Of(w).KV.Get(ctx, wire.CursorKey("x"))
	require.NoError(t, err, "nothing committed while the batch runs")
	c, err := wire.DecodeCursor(e.Value())
	require.NoError(t, err)
	require.Equal(t, second, c.Seq, "the first two messages are committed mid-batch")
	close(release)
	require.NoError(t, <-done)
	e, err = handles.Of(w).KV.Get(ctx, wire.CursorKey("x"))
	require.NoError(t, err)
	c, err = wire.DecodeCursor(e.Value())
	require.NoError(t, err)
	require.Equal(t, seqs[5], c.Seq)
	_, err = drain.New(w.World, w.Ownership, drain.WithCommitEvery(0, time.Second))
	require.ErrorIs(t, err, drain.ErrInvalidOption)
}
