package mailbox_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/mailbox"
	"github.com/fencepost/fencepost/purge"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// TestStat: one id's depth, oldest message and owner, and the world's
// totals, on every target.
func TestStat(t *testing.T) {
	for _, tg := range testutil.Targets() {
		t.Run(tg.Name, func(t *testing.T) { testStat(t, testutil.Start(t, tg)) })
	}
}

func testStat(t *testing.T, env *testutil.Env) {
	ctx := testutil.Ctx(t, time.Minute)
	w, _ := newWorld(t, env, world.Config{})
	before := time.Now()
	send(t, ctx, w, "a", "1", "2", "3")
	send(t, ctx, w, "b", "1")
	_, err := w.Ownership.Claim(ctx, "a", "n1", time.Minute)
	require.NoError(t, err)
	st, err := w.Mailboxes.Stat(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, uint64(3), st.Depth)
	require.WithinDuration(t, before, st.Oldest, 5*time.Second)
	require.True(t, st.Owner.Held)
	require.Equal(t, "n1", st.Owner.Node)
	ws, err := w.Mailboxes.WorldStat(ctx)
	require.NoError(t, err)
	require.Equal(t, mailbox.WorldStat{IDs: 2, Depth: 4, Owned: 1}, ws)
}

// TestWorldStat_Unlisted: past statListMax subjects WorldStat reads the
// stream's counts instead of listing every subject (12 s and 180 MB in the
// server at a million ids): the same figures, except that a message
// waiting on a subject no id can drain counts in IDs and Depth, not in
// Unroutable (only the moved ones do).
func TestWorldStat_Unlisted(t *testing.T) {
	env := testutil.Start(t, testutil.Target{Name: "single"})
	ctx := testutil.Ctx(t, time.Minute)
	w, _ := newWorld(t, env, world.Config{})
	send(t, ctx, w, "A", "a1", "a2")
	send(t, ctx, w, "B", "b1")
	raw(t, ctx, w, "fp."+w.Name+".mb.*", "moved aside")
	p, err := purge.New(w.World)
	require.NoError(t, err)
	sw, err := p.SweepUnroutable(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, sw.Moved)
	raw(t, ctx, w, "fp."+w.Name+".mb.__8", "waiting")

	listed, err := w.Mailboxes.WorldStat(ctx)
	require.NoError(t, err)
	require.Equal(t, mailbox.WorldStat{IDs: 2, Depth: 3, Unroutable: 2}, listed)

	mailbox.SetStatListMax(t, 1)
	counted, err := w.Mailboxes.WorldStat(ctx)
	require.NoError(t, err)
	require.Equal(t, mailbox.WorldStat{IDs: 3, Depth: 4, Unroutable: 1, Unlisted: true}, counted)
}
