package mailbox_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// (counter, storedState and holdState are drain's state tests' helpers:
// the state read and deleted here is written by a holding.)

// counter is a state handler: each message adds one to its id's "count"
// and appends its body to "seen". It records every call.
type counter struct {
	mu    sync.Mutex
	calls []string
}

func (c *counter) handle(_ context.Context, m drain.Message, st *drain.State) error {
	c.mu.Lock()
	c.calls = append(c.calls, string(m.Body))
	c.mu.Unlock()
	n := 0
	if v, ok := st.Get("count"); ok {
		n, _ = strconv.Atoi(string(v))
	}
	seen, _ := st.Get("seen")
	if err := st.Put("count", []byte(strconv.Itoa(n+1))); err != nil {
		return err
	}
	return st.Put("seen", append(seen, m.Body...))
}

func (c *counter) bodies() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.calls...)
}

// storedState reads id's state from the bucket through the stream leader
// (a KV get may be answered by a lagging replica on R3): the subjects from
// the stream info, each key's last message by a leader get.
func storedState(t *testing.T, w *client.World, id string) map[string]string {
	t.Helper()
	ctx := testutil.Ctx(t, 10*time.Second)
	info, err := handles.Of(w).Bucket.Info(ctx, jetstream.WithSubjectFilter(wire.StateFilter(w.Name, id)))
	require.NoError(t, err)
	out := map[string]string{}
	for subj := range info.State.Subjects {
		m, err := jsapi.LeaderGet(ctx, handles.Of(w).JS.Conn(), wire.BucketStream(w.Name), jsapi.GetRequest{LastFor: subj})
		require.NoError(t, err)
		if jsapi.IsMarker(m.Header) {
			continue
		}
		key, err := wire.StateKeyOf(w.Name, id, subj)
		require.NoError(t, err)
		out[key] = string(m.Data)
	}
	return out
}

// holdState opens a session of node and holds id through it with state.
func holdState(t *testing.T, ctx context.Context, w *client.World, d *drain.Drainer, node, id string) (*ownership.Session, *drain.Holding) {
	t.Helper()
	ss, err := w.Ownership.OpenSession(ctx, node, time.Minute)
	require.NoError(t, err)
	t.Cleanup(func() { ss.Close() })
	l, err := ss.Claim(ctx, id)
	require.NoError(t, err)
	h, err := d.HoldState(l)
	require.NoError(t, err)
	return ss, h
}

// TestState_ReadDeleteReset: ReadState shows the stored state with its
// cursor; DeleteState is refused while the id is held, removes every key
// (the cursor kept) once it is free, and fences out the last holder; a
// world reset drops the state with everything else.
func TestState_ReadDeleteReset(t *testing.T) {
	env := testutil.Start(t, testutil.Target{Name: "single"})
	ctx := testutil.Ctx(t, time.Minute)
	w, d := newWorld(t, env, world.Config{})
	ss, h := holdState(t, ctx, w, d, "n1", "x")
	var c counter
	send(t, ctx, w, "x", "a", "b")
	res, err := h.Drain(ctx, drain.StateHandler(c.handle).Handler())
	require.NoError(t, err)
	st, err := w.Mailboxes.ReadState(ctx, "x")
	require.NoError(t, err)
	require.Equal(t, res.Cursor, st.Cursor)
	require.Equal(t, []string{"count", "seen"}, st.Keys())
	require.Equal(t, "2", string(st.Values["count"]))

	_, err = w.Mailboxes.DeleteState(ctx, "x", "operator")
	require.ErrorIs(t, err, ownership.ErrHeld)
	require.Len(t, storedState(t, w, "x"), 2, "refused, yet deleted")

	require.NoError(t, ss.Close())
	keys, err := w.Mailboxes.DeleteState(ctx, "x", "operator")
	require.NoError(t, err)
	require.Equal(t, []string{"count", "seen"}, keys)
	require.Empty(t, storedState(t, w, "x"))
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
	_, h2 := holdState(t, ctx, w, d, "n2", "x")
	send(t, ctx, w, "x", "c")
	_, err = h2.Drain(ctx, drain.StateHandler(c.handle).Handler())
	require.NoError(t, err)
	require.Equal(t, map[string]string{"count": "1", "seen": "c"}, storedState(t, w, "x"))

	require.NoError(t, env.Client.ResetWorld(ctx, w.Name))
	require.Empty(t, storedState(t, w, "x"), "the reset kept the state")
	st, err = w.Mailboxes.ReadState(ctx, "x")
	require.NoError(t, err)
	require.Empty(t, st.Values)
}
