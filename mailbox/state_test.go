package mailbox_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// TestState_ReadDeleteReset: ReadState shows the stored state with its
// cursor; DeleteState is refused while the id is held, removes every key
// (the cursor kept) once it is free, and fences out the last holder; a
// world reset drops the state with everything else.
func TestState_ReadDeleteReset(t *testing.T) {
	env := testutil.Start(t, testutil.Target{Name: "single"})
	ctx := testutil.Ctx(t, time.Minute)
	w, d := newWorld(t, env, world.Config{})
	ss, h := testutil.HoldState(t, ctx, w, d, "n1", "x")
	var c testutil.Counter
	send(t, ctx, w, "x", "a", "b")
	res, err := h.Drain(ctx, drain.StateHandler(c.Handle).Handler())
	require.NoError(t, err)
	st, err := w.Mailboxes.ReadState(ctx, "x")
	require.NoError(t, err)
	require.Equal(t, res.Cursor, st.Cursor)
	require.Equal(t, []string{"count", "seen"}, st.Keys())
	require.Equal(t, "2", string(st.Values["count"]))

	_, err = w.Mailboxes.DeleteState(ctx, "x", "operator")
	require.ErrorIs(t, err, ownership.ErrHeld)
	require.Len(t, testutil.StoredState(t, w, "x"), 2, "refused, yet deleted")

	require.NoError(t, ss.Close())
	keys, err := w.Mailboxes.DeleteState(ctx, "x", "operator")
	require.NoError(t, err)
	require.Equal(t, []string{"count", "seen"}, keys)
	require.Empty(t, testutil.StoredState(t, w, "x"))
	st, err = w.Mailboxes.ReadState(ctx, "x")
	require.NoError(t, err)
	require.Empty(t, st.Values)
	require.Equal(t, res.Cursor, st.Cursor, "the cursor kept")
	keys, err = w.Mailboxes.DeleteState(ctx, "x", "operator")
	require.NoError(t, err)
	require.Empty(t, keys)
	_, err = w.Mailboxes.ReadState(ctx, "")
	require.ErrorIs(t, err, wire.ErrInvalidID)

	// A new holder starts from the empty state.
	_, h2 := testutil.HoldState(t, ctx, w, d, "n2", "x")
	send(t, ctx, w, "x", "c")
	_, err = h2.Drain(ctx, drain.StateHandler(c.Handle).Handler())
	require.NoError(t, err)
	require.Equal(t, map[string]string{"count": "1", "seen": "c"}, testutil.StoredState(t, w, "x"))

	require.NoError(t, env.Client.ResetWorld(ctx, w.Name))
	require.Empty(t, testutil.StoredState(t, w, "x"), "the reset kept the state")
	st, err = w.Mailboxes.ReadState(ctx, "x")
	require.NoError(t, err)
	require.Empty(t, st.Values)
}
