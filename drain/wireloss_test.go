package drain_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/queue"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// The tests of the wire contract (docs/wire.md): what a producer in another language can
// store must be delivered, dead-lettered or surfaced, never lost. Each
// posts with plain JetStream publishes where the issue did. They run on
// the single node: they are about what the broker stores, not about
// replication.
var wireCases = []mailboxCase{
	{"OwnDeadLetterIDNotDefeatable", testOwnDeadLetterID},
	{"MsgIDScopePerMailbox", testMsgIDScope},
	{"TooBigToDeadLetter_DeadLetteredInTwoParts", testTooBigDeadLetter},
	{"DeadLetterFails_HandlerNotCalledAgain", testDeadLetterFails},
	{"HeaderCase_SenderRule", testHeaderCaseAndSender},
}

func TestWire(t *testing.T) {
	env := testutil.Start(t, testutil.Target{Name: "single"})
	for _, c := range wireCases {
		t.Run(c.name, func(t *testing.T) { c.fn(t, env) })
	}
}

// raw publishes like a producer that knows only docs/wire.md.
var raw = testutil.Publish

// failAll is a handler that fails every delivery and counts them.
func failAll(calls *atomic.Int64) drain.Handler {
	return func(context.Context, drain.Message) error {
		calls.Add(1)
		return errors.New("cannot handle it")
	}
}

// deadLetterOne drains id with a failing handler until its mailbox is
// empty (each drain stops at a failure and backs off).
func deadLetterOne(t *testing.T, ctx context.Context, w *client.World, d *drain.Drainer, id string) {
	t.Helper()
	lease, err := w.Ownership.Claim(ctx, id, "n1", time.Minute)
	require.NoError(t, err)
	var calls atomic.Int64
	res, err := d.DrainLease(ctx, lease, failAll(&calls))
	require.NoError(t, err)
	require.Equal(t, 1, res.DeadLettered)
}

// A producer's Nats-Msg-Id "fp-dl-<seq>" once made the dead letter of
// message <seq> of another id a "duplicate": the message was gone.
func testOwnDeadLetterID(t *testing.T, env *testutil.Env) {
	ctx := testutil.Ctx(t, time.Minute)
	w, d := newWorld(t, env, world.Config{MaxDeliveries: 2})
	p, err := w.Queue.Send(ctx, "b", []byte("poison"))
	require.NoError(t, err)
	seq := strconv.FormatUint(p.Seq, 10)
	for _, key := range []string{"fp-dl-" + seq, wire.ScopedMsgID("b", "fp-dl-"+seq)} {
		raw(t, ctx, w, wire.MailboxSubject(w.Name, "a"), "trap", "Nats-Msg-Id", key)
	}
	deadLetterOne(t, ctx, w, d, "b")
	dls, err := w.Mailboxes.DeadLetters(ctx, "b", 0)
	require.NoError(t, err)
	require.Len(t, dls, 1, "the dead letter was taken for a duplicate of a producer's message")
	require.Equal(t, p.Seq, dls[0].MailboxSeq)
	require.Equal(t, "poison", string(dls[0].Body))
}

// The same idempotency key posted to two ids stores both, through the Go
// client and through a raw producer that follows docs/wire.md.
func testMsgIDScope(t *testing.T, env *testutil.Env) {
	ctx := testutil.Ctx(t, time.Minute)
	w, _ := newWorld(t, env, world.Config{})
	a, err := w.Queue.Send(ctx, "A", []byte("1"), queue.WithMsgID("same-key"))
	require.NoError(t, err)
	b, err := w.Queue.Send(ctx, "B", []byte("2"), queue.WithMsgID("same-key"))
	require.NoError(t, err)
	require.False(t, b.Duplicate, "B's post was suppressed by A's key")
	require.NotEqual(t, a.Seq, b.Seq)
	again, err := w.Queue.Send(ctx, "B", []byte("2"), queue.WithMsgID("same-key"))
	require.NoError(t, err)
	require.True(t, again.Duplicate, "within one mailbox the key still deduplicates")
	require.Equal(t, b.Seq, again.Seq)
	raw(t, ctx, w, wire.MailboxSubject(w.Name, "C"), "3", "Nats-Msg-Id", wire.ScopedMsgID("C", "same-key"))
	for _, id := range []string{"A", "B", "C"} {
		require.Equal(t, uint64(1), stored(t, w, wire.MailboxSubject(w.Name, id)), id)
	}
}

// A body at the world's limit used to fail its dead-lettering (no room for
// the headers) and was redelivered forever; now its dead letter is stored
// in two parts and lists as one.
func testTooBigDeadLetter(t *testing.T, env *testutil.Env) {
	ctx := testutil.Ctx(t, time.Minute)
	w, d := newWorld(t, env, world.Config{MaxMsgSize: 4096, MaxDeliveries: 2})
	from := strings.Repeat("f", 200)
	hdr := []string{"Fencepost-From", from, "X-Trace", "t1"}
	h := nats.Header{}
	h.Set("Fencepost-From", from)
	h.Set("X-Trace", "t1")
	body := strings.Repeat("b", 4096-queue.HeaderSize(h)) // exactly at the limit
	raw(t, ctx, w, wire.MailboxSubject(w.Name, "big"), body, hdr...)
	send(t, ctx, w, "big", "after")
	lease, err := w.Ownership.Claim(ctx, "big", "n1", time.Minute)
	require.NoError(t, err)
	var calls atomic.Int64
	handler := func(_ context.Context, m drain.Message) error {
		if string(m.Body) == "after" {
			return nil
		}
		calls.Add(1)
		return errors.New(strings.Repeat("e", 2000))
	}
	res, err := d.DrainLease(ctx, lease, handler)
	require.NoError(t, err)
	require.Equal(t, 1, res.DeadLettered)
	require.Equal(t, 1, res.Acked)
	require.Equal(t, int64(2), calls.Load())
	dls, err := w.Mailboxes.DeadLetters(ctx, "big", 0)
	require.NoError(t, err)
	require.Len(t, dls, 1)
	require.Equal(t, body, string(dls[0].Body))
	require.Equal(t, from, dls[0].From)
	require.Equal(t, "t1", dls[0].Headers.Get("X-Trace"))
	require.NotZero(t, dls[0].BodySeq)
	require.Equal(t, 2, dls[0].Deliveries)
	st, err := w.Mailboxes.Stat(ctx, "big")
	require.NoError(t, err)
	require.Zero(t, st.Depth)
	// Repost brings it back whole and removes both parts.
	n, err := w.Mailboxes.Repost(ctx, w.Queue, "big")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Zero(t, stored(t, w, wire.DeadLetterSubject(w.Name, "big")))
	var rec testutil.Recorder
	_, err = d.DrainLease(ctx, lease, rec.Handle)
	require.NoError(t, err)
	require.Equal(t, []string{body}, rec.Bodies())
	require.Equal(t, from, rec.Msgs()[0].From)
}

// When dead-lettering fails (here: the id's dead letters are full), the
// message stays, its count is kept, and no later drain calls the handler
// with it again; the drain says why.
func testDeadLetterFails(t *testing.T, env *testutil.Env) {
	ctx := testutil.Ctx(t, time.Minute)
	w, d := newWorld(t, env, world.Config{MaxDeliveries: 2, MaxMsgsPerMailbox: 2})
	for i := range 2 { // fill the dead letters of x
		raw(t, ctx, w, wire.DeadLetterSubject(w.Name, "x"), "old"+strconv.Itoa(i))
	}
	send(t, ctx, w, "x", "poison")
	lease, err := w.Ownership.Claim(ctx, "x", "n1", time.Minute)
	require.NoError(t, err)
	var calls atomic.Int64
	for range 4 {
		_, err = d.DrainLease(ctx, lease, failAll(&calls))
		require.ErrorIs(t, err, drain.ErrDeadLetter)
	}
	require.Equal(t, int64(2), calls.Load(), "the handler was called past max_deliveries")
	st, err := w.Mailboxes.Stat(ctx, "x")
	require.NoError(t, err)
	require.Equal(t, uint64(1), st.Depth, "the message must stay")
	require.Equal(t, 2, st.Failures)
	require.True(t, st.Undeliverable, "stat must surface it")
	// Room again: the next drain dead-letters it, still without a call.
	_, err = w.Mailboxes.PurgeDeadLetters(ctx, "x")
	require.NoError(t, err)
	res, err := d.DrainLease(ctx, lease, failAll(&calls))
	require.NoError(t, err)
	require.Equal(t, 1, res.DeadLettered)
	require.Equal(t, int64(2), calls.Load())
	dls, err := w.Mailboxes.DeadLetters(ctx, "x", 0)
	require.NoError(t, err)
	require.Len(t, dls, 1)
	require.Equal(t, "poison", string(dls[0].Body))
	require.Equal(t, "cannot handle it", dls[0].Error)
}

// Fencepost's own header is read whatever its case; a sender that breaks
// the rule the Go client enforces is not handed on as a sender.
func testHeaderCaseAndSender(t *testing.T, env *testutil.Env) {
	ctx := testutil.Ctx(t, time.Minute)
	w, d := newWorld(t, env, world.Config{})
	subj := wire.MailboxSubject(w.Name, "h")
	raw(t, ctx, w, subj, "lower", "fencepost-from", "billing")
	raw(t, ctx, w, subj, "upper", "FENCEPOST-FROM", "billing")
	raw(t, ctx, w, subj, "long", "Fencepost-From", strings.Repeat("s", 300))
	raw(t, ctx, w, subj, "tab", "Fencepost-From", "a\tb")
	raw(t, ctx, w, subj, "fine", "Fencepost-From", "billing", "X-Own", "v")
	lease, err := w.Ownership.Claim(ctx, "h", "n1", time.Minute)
	require.NoError(t, err)
	var rec testutil.Recorder
	_, err = d.DrainLease(ctx, lease, rec.Handle)
	require.NoError(t, err)
	require.Equal(t, []string{"lower", "upper", "long", "tab", "fine"}, rec.Bodies())
	from := make([]string, len(rec.Msgs()))
	for i, m := range rec.Msgs() {
		from[i] = m.From
		require.Empty(t, m.Headers.Get("fencepost-from"), "a reserved header leaked to the handler")
	}
	require.Equal(t, []string{"billing", "billing", "", "", "billing"}, from)
	require.Equal(t, "v", rec.Msgs()[4].Headers.Get("X-Own"))
}
