package drain_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/testkit/faults"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

func storedCursor(t *testing.T, w *client.World, id string) uint64 {
	t.Helper()
	m, err := jsapi.LeaderGet(testutil.Ctx(t, 10*time.Second), handles.Of(w).JS.Conn(), wire.BucketStream(w.Name), jsapi.GetRequest{LastFor: wire.KeySubject(w.Name, wire.CursorKey(id))})
	if errors.Is(err, jsapi.ErrNotFound) {
		return 0
	}
	require.NoError(t, err)
	c, err := wire.DecodeCursor(m.Data)
	require.NoError(t, err)
	return c.Seq
}

// TestState_CommittedWithCursor: a state handler's writes are stored with
// the cursor (a drain, then deliveries read elsewhere and committed
// together), each handler sees the writes of the messages before it, and
// the next holder reads them.
func TestState_CommittedWithCursor(t *testing.T) {
	for _, tg := range testutil.Targets() {
		t.Run(tg.Name, func(t *testing.T) {
			env := testutil.Start(t, tg)
			ctx := testutil.Ctx(t, time.Minute)
			w, d := newWorld(t, env, world.Config{})
			ss, h := testutil.HoldState(t, ctx, w, d, "n1", "x")
			var c testutil.Counter
			hd := drain.StateHandler(c.Handle).Handler()

			send(t, ctx, w, "x", "a", "b", "c")
			res, err := h.Drain(ctx, hd)
			require.NoError(t, err)
			require.Equal(t, 3, res.Count)
			require.Equal(t, map[string]string{"count": "3", "seen": "abc"}, testutil.StoredState(t, w, "x"))
			require.Equal(t, res.Cursor, storedCursor(t, w, "x"))

			// Deliveries read elsewhere: handed out live, committed by Flush.
			before := res.Cursor
			send(t, ctx, w, "x", "d", "e")
			msgs := mailboxMsgs(t, ctx, w, "x", before)
			require.Len(t, msgs, 2)
			res, ok, err := h.Deliver(ctx, msgs, hd)
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, 2, res.Count)
			require.NoError(t, h.Flush(ctx))
			require.Equal(t, map[string]string{"count": "5", "seen": "abcde"}, testutil.StoredState(t, w, "x"))
			require.Equal(t, msgs[1].Sequence, storedCursor(t, w, "x"))

			// The next holder reads the state: a drain on the lock path.
			require.NoError(t, ss.Close())
			send(t, ctx, w, "x", "f")
			l, err := w.Ownership.Claim(ctx, "x", "n2", time.Minute)
			require.NoError(t, err)
			var c2 testutil.Counter
			_, err = d.DrainLease(ctx, l, drain.StateHandler(c2.Handle).Handler(), drain.WithState())
			require.NoError(t, err)
			require.Equal(t, []string{"f"}, c2.Bodies())
			require.Equal(t, map[string]string{"count": "6", "seen": "abcdef"}, testutil.StoredState(t, w, "x"))

			// A state handler run by a drain without state refuses the
			// message.
			err = drain.StateHandler(c2.Handle).Handler()(ctx, drain.Message{ID: "x"})
			require.ErrorIs(t, err, drain.ErrNoState)
		})
	}
}

// TestState_SeizedHolderStoresNothing: a holding whose id is seized
// between its handler and its commit (the hook runs after the holding's
// last check) sends its batch with the old fence: the broker refuses all
// of it, no state key moves, and the new holder handles the messages
// again from the state before them.
func TestState_SeizedHolderStoresNothing(t *testing.T) {
	env := testutil.Start(t, testutil.Target{Name: "single"})
	ctx := testutil.Ctx(t, time.Minute)
	w, d := newWorld(t, env, world.Config{})
	_, h := testutil.HoldState(t, ctx, w, d, "n1", "x")
	var c testutil.Counter
	hd := drain.StateHandler(c.Handle).Handler()
	send(t, ctx, w, "x", "a")
	_, err := h.Drain(ctx, hd)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"count": "1", "seen": "a"}, testutil.StoredState(t, w, "x"))

	send(t, ctx, w, "x", "b", "c")
	var seized *ownership.Lease
	drain.SetBeforeCommit(d, func(id string, _ wire.Cursor) {
		if seized == nil {
			var err error
			seized, err = w.Ownership.Seize(ctx, id, "n2", time.Minute, true)
			require.NoError(t, err)
		}
	})
	before := bucketLastSeq(t, w)
	_, err = h.Drain(ctx, hd)
	require.Error(t, err)
	require.True(t, errors.Is(err, ownership.ErrHeld) || errors.Is(err, ownership.ErrFenced), "%v", err)
	require.Equal(t, []string{"a", "b", "c"}, c.Bodies(), "the stale holder ran its handler")
	require.Equal(t, map[string]string{"count": "1", "seen": "a"}, testutil.StoredState(t, w, "x"), "a refused batch stored a state write")
	// Only the seize wrote to the bucket (its force key and the record).
	require.Equal(t, before+2, bucketLastSeq(t, w))

	drain.SetBeforeCommit(d, nil)
	var c2 testutil.Counter
	_, err = d.DrainLease(ctx, seized, drain.StateHandler(c2.Handle).Handler(), drain.WithState())
	require.NoError(t, err)
	require.Equal(t, []string{"b", "c"}, c2.Bodies())
	require.Equal(t, map[string]string{"count": "3", "seen": "abc"}, testutil.StoredState(t, w, "x"))
}

// TestState_LapsedHolderStoresNothing: a holder paused past its lease
// (its session stopped renewing; another node claimed the id after it
// lapsed) sends its batch after waking up, past its own check: refused
// whole by the fence. The new holder's state is untouched.
func TestState_LapsedHolderStoresNothing(t *testing.T) {
	env := testutil.Start(t, testutil.Target{Name: "single"})
	ctx := testutil.Ctx(t, time.Minute)
	w, d := newWorld(t, env, world.Config{})
	ss, err := w.Ownership.OpenSession(ctx, "n1", 500*time.Millisecond)
	require.NoError(t, err)
	l, err := ss.Claim(ctx, "x")
	require.NoError(t, err)
	h, err := d.HoldState(l)
	require.NoError(t, err)
	var c testutil.Counter
	hd := drain.StateHandler(c.Handle).Handler()
	send(t, ctx, w, "x", "a")
	_, err = h.Drain(ctx, hd)
	require.NoError(t, err)
	msgs := mailboxMsgs(t, ctx, w, "x", storedCursor(t, w, "x"))
	require.Empty(t, msgs)

	send(t, ctx, w, "x", "b")
	msgs = mailboxMsgs(t, ctx, w, "x", storedCursor(t, w, "x"))
	var other *ownership.Lease
	drain.SetBeforeCommit(d, func(id string, _ wire.Cursor) {
		// The pause: the session stops renewing, the id lapses, n2
		// claims it.
		require.NoError(t, ss.Orphan())
		testutil.WaitFor(t, 10*time.Second, "n2 claims x", func() bool {
			var err error
			other, err = w.Ownership.Claim(ctx, id, "n2", time.Minute)
			return err == nil
		})
	})
	_, ok, err := h.Deliver(ctx, msgs, hd)
	require.True(t, ok)
	if err == nil {
		err = h.Flush(ctx)
	}
	require.Error(t, err, "the stale batch was stored")
	require.Equal(t, map[string]string{"count": "1", "seen": "a"}, testutil.StoredState(t, w, "x"))

	drain.SetBeforeCommit(d, nil)
	var c2 testutil.Counter
	_, err = d.DrainLease(ctx, other, drain.StateHandler(c2.Handle).Handler(), drain.WithState())
	require.NoError(t, err)
	require.Equal(t, []string{"b"}, c2.Bodies())
	require.Equal(t, map[string]string{"count": "2", "seen": "ab"}, testutil.StoredState(t, w, "x"))
}

// TestState_UnknownOutcome: a batch whose answer was lost is resolved by
// the next read: stored, the state and the cursor moved together and the
// message is not handed out again; not stored, neither moved and it is.
func TestState_UnknownOutcome(t *testing.T) {
	for _, stored := range []bool{true, false} {
		t.Run("stored="+strconv.FormatBool(stored), func(t *testing.T) {
			env := testutil.Start(t, testutil.Target{Name: "single"})
			ctx := testutil.Ctx(t, time.Minute)
			w, d := newWorld(t, env, world.Config{})
			_, h := testutil.HoldState(t, ctx, w, d, "n1", "x")
			var c testutil.Counter
			hd := drain.StateHandler(c.Handle).Handler()
			send(t, ctx, w, "x", "a")
			_, err := h.Drain(ctx, hd)
			require.NoError(t, err)

			send(t, ctx, w, "x", "b")
			msgs := mailboxMsgs(t, ctx, w, "x", storedCursor(t, w, "x"))
			drain.SetCommitFault(h, func(send func() (jetstream.PubAckFuture, error)) (jetstream.PubAckFuture, error) {
				if !stored {
					return drain.LostAnswer(nil, nats.ErrTimeout), nil // never sent
				}
				f, err := send()
				require.NoError(t, err)
				select { // stored, and the answer is lost
				case <-f.Ok():
				case err := <-f.Err():
					t.Fatalf("the batch was refused: %v", err)
				}
				return drain.LostAnswer(f.Msg(), nats.ErrTimeout), nil
			})
			_, ok, err := h.Deliver(ctx, msgs, hd)
			require.True(t, ok)
			require.NoError(t, err)
			err = h.Flush(ctx)
			require.ErrorIs(t, err, drain.ErrUnknown)
			drain.SetCommitFault(h, nil)

			// The next run reads what is there.
			_, err = h.Drain(ctx, hd)
			require.NoError(t, err)
			if stored {
				require.Equal(t, []string{"a", "b"}, c.Bodies(), "a stored message handed out again")
			} else {
				require.Equal(t, []string{"a", "b", "b"}, c.Bodies(), "a message whose batch was lost not handed out again")
			}
			require.Equal(t, map[string]string{"count": "2", "seen": "ab"}, testutil.StoredState(t, w, "x"))
		})
	}
}

// TestState_BadWritesRefused: a key or size outside the limits is refused
// with ErrInvalidState and stages nothing; a handler that returns the
// error writes nothing at all, and the message stays.
func TestState_BadWritesRefused(t *testing.T) {
	env := testutil.Start(t, testutil.Target{Name: "single"})
	ctx := testutil.Ctx(t, time.Minute)
	w, d := newWorld(t, env, world.Config{MaxDeliveries: 1})
	_, h := testutil.HoldState(t, ctx, w, d, "n1", "x")
	send(t, ctx, w, "x", "a")
	var errs []error
	bad := func(_ context.Context, _ drain.Message, st *drain.State) error {
		require.NoError(t, st.Put("ok", []byte("1")))
		for _, err := range []error{
			st.Put("a.b", []byte("v")),
			st.Put("", []byte("v")),
			st.Put(strings.Repeat("k", wire.MaxStateKeyBytes+1), nil),
			st.Put("big", make([]byte, wire.MaxStateValueBytes+1)),
			st.Delete("*"),
		} {
			require.ErrorIs(t, err, drain.ErrInvalidState)
			errs = append(errs, err)
		}
		_, ok := st.Get("big")
		require.False(t, ok, "a refused write was staged")
		require.Equal(t, []string{"ok"}, st.Keys())
		return errs[0]
	}
	before := bucketLastSeq(t, w)
	res, err := h.Drain(ctx, drain.StateHandler(bad).Handler())
	require.NoError(t, err)
	require.Equal(t, 1, res.DeadLettered, "the failed message went to the dead letters")
	require.Contains(t, errs[0].Error(), `"a.b" has '.' at byte 1`)
	require.Contains(t, errs[3].Error(), "16385 bytes, the limit is 16384")
	require.Empty(t, testutil.StoredState(t, w, "x"), "a failed handler's writes were stored")
	require.Equal(t, before+1, bucketLastSeq(t, w), "only the cursor was written")

	send(t, ctx, w, "x", "b")

	// Counts: the 65th key and 256 KiB in all are refused.
	var keysErr, sizeErr error
	many := func(_ context.Context, _ drain.Message, st *drain.State) error {
		for i := range wire.MaxStateKeys {
			if err := st.Put("k"+strconv.Itoa(i), make([]byte, 1000)); err != nil {
				return err
			}
		}
		keysErr = st.Put("one-more", nil)
		for i := range wire.MaxStateKeys {
			if err := st.Put("k"+strconv.Itoa(i), make([]byte, wire.MaxStateBytes/wire.MaxStateKeys)); err != nil {
				sizeErr = err
				break
			}
		}
		return nil
	}
	_, err = h.Drain(ctx, drain.StateHandler(many).Handler())
	require.NoError(t, err)
	require.ErrorIs(t, keysErr, drain.ErrInvalidState)
	require.Contains(t, keysErr.Error(), "key 65 of the id's state, the limit is 64")
	require.ErrorIs(t, sizeErr, drain.ErrInvalidState)
	st := testutil.StoredState(t, w, "x")
	require.Len(t, st, wire.MaxStateKeys)
	total := 0
	for k, v := range st {
		total += len(k) + len(v)
	}
	require.LessOrEqual(t, total, wire.MaxStateBytes)
}

// TestState_OldWorldRefused: a world whose bucket does not take atomic
// batches (created before state) refuses a holding or drain with state,
// before anything is written.
func TestState_OldWorldRefused(t *testing.T) {
	env := testutil.Start(t, testutil.Target{Name: "single"})
	ctx := testutil.Ctx(t, time.Minute)
	w, _ := newWorld(t, env, world.Config{})
	js := env.Client.JetStream()
	cfg := handles.Of(w).Bucket.CachedInfo().Config
	cfg.AllowAtomicPublish = false
	_, err := js.UpdateStream(ctx, cfg)
	require.NoError(t, err)
	old, err := world.Open(ctx, js, w.Name)
	require.NoError(t, err)
	d, err := drain.New(old, w.Ownership)
	require.NoError(t, err)
	ss, err := w.Ownership.OpenSession(ctx, "n1", time.Minute)
	require.NoError(t, err)
	defer ss.Close()
	l, err := ss.Claim(ctx, "x")
	require.NoError(t, err)
	_, err = d.HoldState(l)
	require.ErrorIs(t, err, drain.ErrNoState)
	l2, err := w.Ownership.Claim(ctx, "y", "n2", time.Minute)
	require.NoError(t, err)
	_, err = d.DrainLease(ctx, l2, func(context.Context, drain.Message) error { return nil }, drain.WithState())
	require.ErrorIs(t, err, drain.ErrNoState)
}

// TestState_SubjectsBounded: deleted keys leave a delete marker each; the
// keys an id has used (set and deleted) are bounded so that one batch and
// one read cover them all; DeleteState purges the markers.
func TestState_SubjectsBounded(t *testing.T) {
	env := testutil.Start(t, testutil.Target{Name: "single"})
	ctx := testutil.Ctx(t, time.Minute)
	w, d := newWorld(t, env, world.Config{})
	ss, h := testutil.HoldState(t, ctx, w, d, "n1", "x")
	var refused error
	used := 0
	churn := func(_ context.Context, _ drain.Message, st *drain.State) error {
		for i := 0; ; i++ {
			k := "k" + strconv.Itoa(i)
			if err := st.Put(k, []byte("v")); err != nil {
				refused = err
				return nil
			}
			require.NoError(t, st.Delete(k))
			used++
		}
	}
	send(t, ctx, w, "x", "a")
	_, err := h.Drain(ctx, drain.StateHandler(churn).Handler())
	require.NoError(t, err)
	require.Equal(t, wire.MaxStateSubjects, used)
	require.ErrorIs(t, refused, drain.ErrInvalidState)
	require.Contains(t, refused.Error(), "the limit is 999")
	st, err := w.Mailboxes.ReadState(ctx, "x")
	require.NoError(t, err, "the state of an id at the bound reads")
	require.Empty(t, st.Values)
	require.Equal(t, wire.MaxStateSubjects, st.Deleted)

	// A new holder knows the markers: a new key is refused, a used one not.
	require.NoError(t, ss.Close())
	_, h2 := testutil.HoldState(t, ctx, w, d, "n2", "x")
	var newErr, oldErr error
	send(t, ctx, w, "x", "b")
	_, err = h2.Drain(ctx, drain.StateHandler(func(_ context.Context, _ drain.Message, st *drain.State) error {
		newErr = st.Put("fresh", nil)
		oldErr = st.Put("k7", []byte("back"))
		return nil
	}).Handler())
	require.NoError(t, err)
	require.ErrorIs(t, newErr, drain.ErrInvalidState)
	require.NoError(t, oldErr)

	require.NoError(t, w.Ownership.Release(ctx, "x", "n2"))
	keys, err := w.Mailboxes.DeleteState(ctx, "x", "operator")
	require.NoError(t, err)
	require.Equal(t, []string{"k7"}, keys)
	st, err = w.Mailboxes.ReadState(ctx, "x")
	require.NoError(t, err)
	require.Empty(t, st.Values)
	require.Zero(t, st.Deleted, "the markers were purged")
}

// TestState_RefusedBatchForgets: a batch the server refuses for a reason
// other than the fence (here a value over the bucket's message size)
// stores nothing, and the holding forgets what its handlers staged: the
// message is handed out again with the state as it was, not with its own
// earlier writes in view.
func TestState_RefusedBatchForgets(t *testing.T) {
	env := testutil.Start(t, testutil.Target{Name: "single"})
	ctx := testutil.Ctx(t, time.Minute)
	w, d := newWorld(t, env, world.Config{})
	_, h := testutil.HoldState(t, ctx, w, d, "n1", "x")
	var c testutil.Counter
	hd := drain.StateHandler(func(ctx context.Context, m drain.Message, st *drain.State) error {
		if err := c.Handle(ctx, m, st); err != nil {
			return err
		}
		return st.Put("blob", make([]byte, 300))
	}).Handler()
	js := env.Client.JetStream()
	setMax := func(n int32) {
		s, err := js.Stream(ctx, wire.BucketStream(w.Name))
		require.NoError(t, err)
		cfg := s.CachedInfo().Config
		cfg.MaxMsgSize = n
		_, err = js.UpdateStream(ctx, cfg)
		require.NoError(t, err)
	}
	setMax(200)
	send(t, ctx, w, "x", "a")
	_, err := h.Drain(ctx, hd)
	require.Error(t, err, "a batch over the stream's message size was stored")
	require.Empty(t, testutil.StoredState(t, w, "x"))
	require.Zero(t, storedCursor(t, w, "x"))

	setMax(-1)
	_, err = h.Drain(ctx, hd)
	require.NoError(t, err)
	require.Equal(t, []string{"a", "a"}, c.Bodies())
	st := testutil.StoredState(t, w, "x")
	require.Equal(t, "1", st["count"], "the refused batch's writes were kept in view")
	require.Equal(t, "a", st["seen"])
}

// TestState_CutOffHolderStoresNothing: a holder cut off from the server
// (a proxy forwards nothing for a while) sends its batch into the void;
// meanwhile its id is seized; when the network comes back the batch
// reaches the server and is refused whole by the fence.
func TestState_CutOffHolderStoresNothing(t *testing.T) {
	env := testutil.Start(t, testutil.Target{Name: "single"})
	ctx := testutil.Ctx(t, time.Minute)
	w, _ := newWorld(t, env, world.Config{})
	p, err := faults.NewProxy(env.Node.ClientURL()[len("nats://"):])
	require.NoError(t, err)
	defer p.Close()
	pc, err := client.Connect(p.URL(), client.WithTimeout(10*time.Second))
	require.NoError(t, err)
	defer pc.Close()
	pw, err := pc.World(ctx, w.Name)
	require.NoError(t, err)
	d, err := drain.New(pw.World, pw.Ownership)
	require.NoError(t, err)
	_, h := testutil.HoldState(t, ctx, pw, d, "n1", "x")
	var c testutil.Counter
	hd := drain.StateHandler(c.Handle).Handler()
	send(t, ctx, w, "x", "a")
	_, err = h.Drain(ctx, hd)
	require.NoError(t, err)

	send(t, ctx, w, "x", "b", "c")
	var seized *ownership.Lease
	drain.SetBeforeCommit(d, func(id string, _ wire.Cursor) {
		if seized != nil {
			return
		}
		p.Hold(2 * time.Second) // the batch goes out into the held network
		var err error
		seized, err = w.Ownership.Seize(ctx, id, "n2", time.Minute, true)
		require.NoError(t, err)
	})
	_, err = h.Drain(ctx, hd)
	require.Error(t, err)
	require.True(t, errors.Is(err, ownership.ErrHeld) || errors.Is(err, ownership.ErrFenced) || errors.Is(err, drain.ErrUnknown), "%v", err)
	require.Equal(t, map[string]string{"count": "1", "seen": "a"}, testutil.StoredState(t, w, "x"), "the cut-off holder's batch was stored")

	var c2 testutil.Counter
	d2, err := drain.New(w.World, w.Ownership)
	require.NoError(t, err)
	_, err = d2.DrainLease(ctx, seized, drain.StateHandler(c2.Handle).Handler(), drain.WithState())
	require.NoError(t, err)
	require.Equal(t, []string{"b", "c"}, c2.Bodies())
	require.Equal(t, map[string]string{"count": "3", "seen": "abc"}, testutil.StoredState(t, w, "x"))
}

// TestState_SharedBatch: the commits of several ids that meet behind a
// batch in flight go out in one atomic batch; each gets the sequence of
// its own cursor; one id's moved fence refuses the whole batch, and no id
// of it stores anything.
func TestState_SharedBatch(t *testing.T) {
	env := testutil.Start(t, testutil.Target{Name: "single"})
	ctx := testutil.Ctx(t, time.Minute)
	w, d := newWorld(t, env, world.Config{})
	lx, err := w.Ownership.Claim(ctx, "x", "n1", time.Minute)
	require.NoError(t, err)
	ly, err := w.Ownership.Claim(ctx, "y", "n1", time.Minute)
	require.NoError(t, err)
	answer := func(f jetstream.PubAckFuture) (*jetstream.PubAck, error) {
		select {
		case a := <-f.Ok():
			return a, nil
		case err := <-f.Err():
			return nil, err
		case <-ctx.Done():
			t.Fatal("no answer")
			return nil, nil
		}
	}
	before := bucketLastSeq(t, w)
	fs := drain.SharedBatch(d, [][]*nats.Msg{
		drain.StateCommitMsgs(d, lx.Fence, 5, map[string][]byte{"count": []byte("1"), "gone": nil}),
		drain.StateCommitMsgs(d, ly.Fence, 7, map[string][]byte{"count": []byte("1")}),
	})
	ax, err := answer(fs[0])
	require.NoError(t, err)
	ay, err := answer(fs[1])
	require.NoError(t, err)
	require.Equal(t, before+5, bucketLastSeq(t, w), "one batch of five messages")
	require.Equal(t, before+5, ay.Sequence)
	require.Equal(t, before+3, ax.Sequence, "x's cursor is the third message")
	cx, err := jsapi.LeaderGet(ctx, handles.Of(w).JS.Conn(), wire.BucketStream(w.Name), jsapi.GetRequest{LastFor: wire.KeySubject(w.Name, wire.CursorKey("x"))})
	require.NoError(t, err)
	require.Equal(t, ax.Sequence, cx.Sequence)
	require.Equal(t, uint64(5), storedCursor(t, w, "x"))
	require.Equal(t, map[string]string{"count": "1"}, testutil.StoredState(t, w, "y"))

	// y is seized: a batch with x's next commit and y's stale one is
	// refused whole.
	_, err = w.Ownership.Seize(ctx, "y", "n2", time.Minute, true)
	require.NoError(t, err)
	before = bucketLastSeq(t, w)
	fs = drain.SharedBatch(d, [][]*nats.Msg{
		drain.StateCommitMsgs(d, lx.Fence, 6, map[string][]byte{"count": []byte("2")}),
		drain.StateCommitMsgs(d, ly.Fence, 8, map[string][]byte{"count": []byte("2")}),
	})
	for _, f := range fs {
		_, err := answer(f)
		var apiErr *jetstream.APIError
		require.ErrorAs(t, err, &apiErr)
		require.Equal(t, jetstream.JSErrCodeStreamWrongLastSequence, apiErr.ErrorCode)
	}
	require.Equal(t, before, bucketLastSeq(t, w), "a refused shared batch stored something")
	require.Equal(t, map[string]string{"count": "1"}, testutil.StoredState(t, w, "x"))
	require.Equal(t, uint64(5), storedCursor(t, w, "x"))
}

// TestState_SharedBatchNeighbourRecommits: two holdings' commits meet in
// one shared batch; one id was seized meanwhile, so the batch is refused
// whole; the other holding, still the holder, commits again alone; the
// seized one stores nothing and its new holder counts from its state.
func TestState_SharedBatchNeighbourRecommits(t *testing.T) {
	env := testutil.Start(t, testutil.Target{Name: "single"})
	ctx := testutil.Ctx(t, time.Minute)
	w, d := newWorld(t, env, world.Config{})
	ss, err := w.Ownership.OpenSession(ctx, "n1", time.Minute)
	require.NoError(t, err)
	defer ss.Close()
	hold := func(id string) *drain.Holding {
		l, err := ss.Claim(ctx, id)
		require.NoError(t, err)
		h, err := d.HoldState(l)
		require.NoError(t, err)
		return h
	}
	hx, hy := hold("x"), hold("y")
	var cx, cy testutil.Counter
	send(t, ctx, w, "x", "a", "b")
	send(t, ctx, w, "y", "a", "b")
	var seized *ownership.Lease
	var once sync.Once
	drain.SetBeforeCommit(d, func(id string, _ wire.Cursor) {
		if id == "y" {
			once.Do(func() {
				var err error
				seized, err = w.Ownership.Seize(ctx, "y", "n2", time.Minute, true)
				require.NoError(t, err)
			})
		}
	})
	release := drain.HoldQueue(d)
	errs := make(chan error, 2)
	go func() { _, err := hx.Drain(ctx, drain.StateHandler(cx.Handle).Handler()); errs <- err }()
	go func() { _, err := hy.Drain(ctx, drain.StateHandler(cy.Handle).Handler()); errs <- err }()
	testutil.WaitFor(t, 10*time.Second, "both commits queued", func() bool { return drain.QueueLen(d) == 2 })
	before := bucketLastSeq(t, w)
	release()
	var got []error
	for range 2 {
		got = append(got, <-errs)
	}
	var heldErrs, oks int
	for _, err := range got {
		switch {
		case err == nil:
			oks++
		case errors.Is(err, ownership.ErrHeld) || errors.Is(err, ownership.ErrFenced):
			heldErrs++
		default:
			t.Fatalf("unexpected: %v", err)
		}
	}
	require.Equal(t, 1, oks, "x, still the holder, commits again alone: %v", got)
	require.Equal(t, 1, heldErrs, "y was seized: %v", got)
	require.Equal(t, map[string]string{"count": "2", "seen": "ab"}, testutil.StoredState(t, w, "x"))
	require.Empty(t, testutil.StoredState(t, w, "y"), "the seized holding's part was stored")
	require.Equal(t, before+3, bucketLastSeq(t, w), "only x's second batch (two keys and the cursor) was stored")

	drain.SetBeforeCommit(d, nil)
	var c2 testutil.Counter
	_, err = d.DrainLease(ctx, seized, drain.StateHandler(c2.Handle).Handler(), drain.WithState())
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b"}, c2.Bodies())
	require.Equal(t, map[string]string{"count": "2", "seen": "ab"}, testutil.StoredState(t, w, "y"))
}

// TestState_RefusedCommitNotSentBack: a state holding's commit P1 is in a
// shared batch refused for a neighbour's fence; the Deliver after it owes
// the commit that falls due within its batch (every 2 messages here) and
// the rest, to the holding's group commit, which sends nothing while P1
// is in flight: it owes its three messages when P1 is settled. P1 is not
// sent again (its keys would go back behind what is owed): what is owed
// goes, with every dirty key. Each message writes its own key here, so a
// key put back would stay back.
func TestState_RefusedCommitNotSentBack(t *testing.T) {
	env := testutil.Start(t, testutil.Target{Name: "single"})
	ctx := testutil.Ctx(t, time.Minute)
	w, d := newWorld(t, env, world.Config{}, drain.WithCommitEvery(2, time.Hour))
	_, h := testutil.HoldState(t, ctx, w, d, "n1", "x")
	put := drain.StateHandler(func(_ context.Context, m drain.Message, st *drain.State) error {
		k, v, _ := strings.Cut(string(m.Body), "=")
		return st.Put(k, []byte(v))
	}).Handler()
	send(t, ctx, w, "x", "k0=1")
	_, err := h.Drain(ctx, put)
	require.NoError(t, err)
	cur := storedCursor(t, w, "x")

	release := drain.HoldQueue(d)
	send(t, ctx, w, "x", "k0=2")
	msgs := mailboxMsgs(t, ctx, w, "x", cur)
	_, ok, err := h.Deliver(ctx, msgs, put) // P1 (k0=2) queued
	require.True(t, ok)
	require.NoError(t, err)
	// A neighbour's doomed part in the same queue.
	ly, err := w.Ownership.Claim(ctx, "y", "n2", time.Minute)
	require.NoError(t, err)
	_, err = w.Ownership.Seize(ctx, "y", "n3", time.Minute, true)
	require.NoError(t, err)
	drain.SendPart(d, drain.StateCommitMsgs(d, ly.Fence, 1, map[string][]byte{"k": []byte("stale")}))

	send(t, ctx, w, "x", "k1=1", "k0=3", "k2=1")
	more := mailboxMsgs(t, ctx, w, "x", msgs[0].Sequence)
	_, ok, err = h.Deliver(ctx, more, put) // k1=1, k0=3, k2=1 owed; P1 in flight
	require.True(t, ok)
	require.NoError(t, err)
	require.Equal(t, 2, drain.QueueLen(d), "P1 and y's part queued, nothing of the Deliver's batch (owed)")
	release()
	require.NoError(t, h.Flush(ctx))
	require.Equal(t, map[string]string{"k0": "3", "k1": "1", "k2": "1"}, testutil.StoredState(t, w, "x"))
	require.Equal(t, more[2].Sequence, storedCursor(t, w, "x"))
	require.Empty(t, testutil.StoredState(t, w, "y"))
}

// TestState_ReadOnlyCommitPlain: a state handler that stages nothing
// commits its cursor as a plain fenced write (one message to the bucket,
// not an atomic batch), through a holding and on the lock path.
func TestState_ReadOnlyCommitPlain(t *testing.T) {
	env := testutil.Start(t, testutil.Target{Name: "single"})
	ctx := testutil.Ctx(t, time.Minute)
	w, d := newWorld(t, env, world.Config{})
	ss, h := testutil.HoldState(t, ctx, w, d, "n1", "x")
	var seen []string
	read := drain.StateHandler(func(_ context.Context, m drain.Message, st *drain.State) error {
		v, _ := st.Get("k")
		seen = append(seen, string(v))
		return nil
	}).Handler()
	plain := func(before uint64) {
		t.Helper()
		require.Equal(t, before+1, bucketLastSeq(t, w), "one cursor write")
		m, err := jsapi.LeaderGet(ctx, handles.Of(w).JS.Conn(), wire.BucketStream(w.Name), jsapi.GetRequest{Seq: before + 1})
		require.NoError(t, err)
		require.Empty(t, m.Header.Get(jsapi.HeaderBatchID), "a batch for a commit without writes")
	}
	// A holding's own drain commits through the queue (a commit of its
	// id may be queued there while a run delivers).
	send(t, ctx, w, "x", "a")
	_, err := h.Drain(ctx, read)
	require.NoError(t, err)

	// What a holding owes goes after its commit in flight was settled:
	// plain.
	send(t, ctx, w, "x", "b")
	msgs := mailboxMsgs(t, ctx, w, "x", storedCursor(t, w, "x"))
	before := bucketLastSeq(t, w)
	_, ok, err := h.Deliver(ctx, msgs, read)
	require.True(t, ok)
	require.NoError(t, err)
	require.NoError(t, h.Flush(ctx))
	plain(before)
	require.Equal(t, msgs[0].Sequence, storedCursor(t, w, "x"))

	// The lock path: plain.
	require.NoError(t, ss.Close())
	l, err := w.Ownership.Claim(ctx, "x", "n2", time.Minute)
	require.NoError(t, err)
	send(t, ctx, w, "x", "c")
	before = bucketLastSeq(t, w)
	_, err = d.DrainLease(ctx, l, read, drain.WithState())
	require.NoError(t, err)
	require.Equal(t, before+3, bucketLastSeq(t, w), "lock, cursor, lock release")
	m, err := jsapi.LeaderGet(ctx, handles.Of(w).JS.Conn(), wire.BucketStream(w.Name), jsapi.GetRequest{LastFor: wire.KeySubject(w.Name, wire.CursorKey("x"))})
	require.NoError(t, err)
	require.Greater(t, m.Sequence, before)
	require.Empty(t, m.Header.Get(jsapi.HeaderBatchID), "a batch for a commit without writes")
	require.Equal(t, []string{"", "", ""}, seen)
}
