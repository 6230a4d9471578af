package drain_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/call"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/queue"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// noAnswerYet fails the test if an answer is waiting on sub. A PING after
// the drain returned comes back after every message the server delivered
// for publishes sent before it on the same connection: an answer the
// drain sent would be pending by then.
func noAnswerYet(t *testing.T, nc *nats.Conn, sub *nats.Subscription) {
	t.Helper()
	require.NoError(t, nc.Flush())
	n, _, err := sub.Pending()
	require.NoError(t, err)
	require.Zero(t, n, "no answer before the commit covering the call was accepted")
}

// TestCall_AnsweredAfterTheCommit: a call's answer is sent only once the
// commit covering it is accepted. The holder that handled it first and
// whose commit the fence refused (a seize between the handler and the
// commit) sends nothing; the next holder handles it again and answers,
// after its commit, with its handler's answer and the call's sequence.
// A message without a reply subject is answered to nobody, and a handler
// that does not Reply answers empty.
func TestCall_AnsweredAfterTheCommit(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	ctx := testutil.Ctx(t, time.Minute)
	w, d := newWorld(t, env, world.Config{})
	nc := env.Client.Conn()
	subj := "_INBOX.test.call1"
	sub, err := nc.SubscribeSync(subj)
	require.NoError(t, err)
	other, err := nc.SubscribeSync("_INBOX.test.>")
	require.NoError(t, err)
	send(t, ctx, w, "a", "before")
	p, err := w.Queue.Send(ctx, "a", []byte("q"), queue.WithReplyTo(subj))
	require.NoError(t, err)
	send(t, ctx, w, "a", "after")

	old, err := w.Ownership.Claim(ctx, "a", "old", time.Minute)
	require.NoError(t, err)
	var once sync.Once
	var seized *ownership.Lease
	drain.SetBeforeCommit(d, func(id string, _ wire.Cursor) {
		once.Do(func() {
			seized, err = w.Ownership.Seize(ctx, id, "new", time.Minute, true)
			require.NoError(t, err)
		})
	})
	answering := func(who string) drain.Handler {
		return drain.CallHandler(func(_ context.Context, m drain.Message) ([]byte, error) {
			return []byte(who + ":" + string(m.Body)), nil
		}).Handler()
	}
	_, err = d.DrainLease(ctx, old, answering("old"))
	var held *ownership.HeldError
	require.ErrorAs(t, err, &held)
	noAnswerYet(t, nc, sub)

	drain.SetBeforeCommit(d, nil)
	res, err := d.DrainLease(ctx, seized, answering("new"))
	require.NoError(t, err)
	require.Equal(t, 3, res.Count)
	m, err := sub.NextMsg(10 * time.Second)
	require.NoError(t, err)
	r, err := call.Parse(m)
	require.NoError(t, err)
	require.Equal(t, call.Reply{Seq: p.Seq, Body: []byte("new:q")}, r)
	require.NoError(t, nc.Flush())
	n, _, _ := other.Pending()
	require.Equal(t, 1, n, "one answer, to the call's subject only")

	// A handler that does not reply: an empty answer once committed.
	p, err = w.Queue.Send(ctx, "a", []byte("q2"), queue.WithReplyTo(subj))
	require.NoError(t, err)
	_, err = d.DrainLease(ctx, seized, func(context.Context, drain.Message) error { return nil })
	require.NoError(t, err)
	m, err = sub.NextMsg(10 * time.Second)
	require.NoError(t, err)
	r, err = call.Parse(m)
	require.NoError(t, err)
	require.Equal(t, call.Reply{Seq: p.Seq}, r)
}

// TestCall_FailedWhenDeadLettered: a call whose handler fails the world's
// max_deliveries times is moved to the dead letters and answered failed,
// with the last handler error; the calls after it go on.
func TestCall_FailedWhenDeadLettered(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	ctx := testutil.Ctx(t, time.Minute)
	w, d := newWorld(t, env, world.Config{MaxDeliveries: 2})
	nc := env.Client.Conn()
	sub, err := nc.SubscribeSync("_INBOX.test.>")
	require.NoError(t, err)
	p1, err := w.Queue.Send(ctx, "a", []byte("bad"), queue.WithReplyTo("_INBOX.test.1"))
	require.NoError(t, err)
	p2, err := w.Queue.Send(ctx, "a", []byte("good"), queue.WithReplyTo("_INBOX.test.2"))
	require.NoError(t, err)
	l, err := w.Ownership.Claim(ctx, "a", "n1", time.Minute)
	require.NoError(t, err)
	h := drain.CallHandler(func(_ context.Context, m drain.Message) ([]byte, error) {
		if string(m.Body) == "bad" {
			return []byte("never sent"), fmt.Errorf("boom at delivery %d\nsecond line", m.Delivery)
		}
		return []byte("ok"), nil
	}).Handler()
	res, err := d.DrainLease(ctx, l, h)
	require.NoError(t, err)
	require.Equal(t, 1, res.DeadLettered)
	got := map[string]call.Reply{}
	for range 2 {
		m, err := sub.NextMsg(10 * time.Second)
		require.NoError(t, err)
		r, err := call.Parse(m)
		require.NoError(t, err)
		got[m.Subject] = r
	}
	require.Equal(t, call.Reply{Seq: p1.Seq, Failed: true, Body: []byte("boom at delivery 2 second line")}, got["_INBOX.test.1"])
	require.Equal(t, call.Reply{Seq: p2.Seq, Body: []byte("ok")}, got["_INBOX.test.2"])
}

// TestCall_ReplySubjects: a worker answers inbox subjects only. A post
// whose reply subject names anything else (a key of the bucket, a
// mailbox, a JetStream API subject, a wildcard) is handled as a message
// and answered to nobody: its holder's connection, which may write keys,
// publishes nothing there. Send refuses such a subject before posting.
func TestCall_ReplySubjects(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	ctx := testutil.Ctx(t, time.Minute)
	w, d := newWorld(t, env, world.Config{})
	nc := env.Client.Conn()
	all, err := nc.SubscribeSync(">")
	require.NoError(t, err)
	bad := []string{
		wire.KeySubject(w.Name, wire.CursorKey("a")),
		wire.MailboxSubject(w.Name, "b"),
		"$JS.API.STREAM.PURGE." + wire.MailboxStream(w.Name),
		"_INBOX.>", "_INBOX.*.x", "_INBOX..x", "_INBOX", "_INBOX.a b",
	}
	for _, s := range bad {
		_, err := w.Queue.Send(ctx, "a", []byte("x"), queue.WithReplyTo(s))
		require.ErrorIs(t, err, queue.ErrInvalidMessage, s)
		require.ErrorIs(t, err, call.ErrInvalidReplyTo, s)
		// Posted raw, as a producer in another language could.
		m := nats.NewMsg(wire.MailboxSubject(w.Name, "a"))
		m.Header.Set(strings.ToLower(call.HeaderReplyTo), s)
		m.Data = []byte(s)
		_, err = handles.Of(w).JS.PublishMsg(ctx, m)
		require.NoError(t, err)
	}
	l, err := w.Ownership.Claim(ctx, "a", "n1", time.Minute)
	require.NoError(t, err)
	var calls int
	res, err := d.DrainLease(ctx, l, func(_ context.Context, m drain.Message) error {
		if m.IsCall() {
			calls++
		}
		return m.Reply([]byte("forged"))
	})
	require.NoError(t, err)
	require.Equal(t, len(bad), res.Count)
	require.Zero(t, calls)
	require.NoError(t, nc.Flush())
	for {
		m, err := all.NextMsg(100 * time.Millisecond)
		if errors.Is(err, nats.ErrTimeout) {
			break
		}
		require.NoError(t, err)
		require.NotEqual(t, "forged", string(m.Data), "published to %s", m.Subject)
	}
}

// TestCall_AnswerTooLarge: an answer the connection cannot carry fails the
// delivery (ErrAnswerTooLarge), whatever the handler returns; after the
// world's deliveries the call is answered failed with that error.
func TestCall_AnswerTooLarge(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	ctx := testutil.Ctx(t, time.Minute)
	w, d := newWorld(t, env, world.Config{MaxDeliveries: 1})
	nc := env.Client.Conn()
	sub, err := nc.SubscribeSync("_INBOX.test.big")
	require.NoError(t, err)
	_, err = w.Queue.Send(ctx, "a", []byte("x"), queue.WithReplyTo("_INBOX.test.big"))
	require.NoError(t, err)
	l, err := w.Ownership.Claim(ctx, "a", "n1", time.Minute)
	require.NoError(t, err)
	var replyErr error
	res, err := d.DrainLease(ctx, l, func(_ context.Context, m drain.Message) error {
		replyErr = m.Reply(make([]byte, nc.MaxPayload()))
		return nil
	})
	require.NoError(t, err)
	require.ErrorIs(t, replyErr, drain.ErrAnswerTooLarge)
	require.Equal(t, 1, res.DeadLettered)
	m, err := sub.NextMsg(10 * time.Second)
	require.NoError(t, err)
	r, err := call.Parse(m)
	require.NoError(t, err)
	require.True(t, r.Failed)
	require.Contains(t, string(r.Body), "answer too large")
}

// TestCall_UnknownCommit: a holding whose commit's answer was lost sends
// no answer then; its next run reads the cursor and answers the calls the
// stored cursor covers, without handing them out again (stored), or hands
// them out again and answers after that run's commit (not stored). One
// answer either way.
func TestCall_UnknownCommit(t *testing.T) {
	for _, stored := range []bool{true, false} {
		t.Run("stored="+strconv.FormatBool(stored), func(t *testing.T) {
			env := testutil.Start(t, testutil.Target{Name: "single"})
			ctx := testutil.Ctx(t, time.Minute)
			w, d := newWorld(t, env, world.Config{})
			nc := env.Client.Conn()
			sub, err := nc.SubscribeSync("_INBOX.test.>")
			require.NoError(t, err)
			ss, err := w.Ownership.OpenSession(ctx, "n1", time.Minute)
			require.NoError(t, err)
			defer ss.Close()
			l, err := ss.Claim(ctx, "x")
			require.NoError(t, err)
			h, err := d.Hold(l)
			require.NoError(t, err)
			var runs []string
			hd := drain.CallHandler(func(_ context.Context, m drain.Message) ([]byte, error) {
				runs = append(runs, string(m.Body))
				return []byte("re:" + string(m.Body)), nil
			}).Handler()
			send(t, ctx, w, "x", "a")
			_, err = h.Drain(ctx, hd)
			require.NoError(t, err)

			p, err := w.Queue.Send(ctx, "x", []byte("b"), queue.WithReplyTo("_INBOX.test.b"))
			require.NoError(t, err)
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
					t.Fatalf("the commit was refused: %v", err)
				}
				return drain.LostAnswer(f.Msg(), nats.ErrTimeout), nil
			})
			_, ok, err := h.Deliver(ctx, msgs, hd)
			require.True(t, ok)
			require.NoError(t, err)
			require.ErrorIs(t, h.Flush(ctx), drain.ErrUnknown)
			drain.SetCommitFault(h, nil)
			noAnswerYet(t, nc, sub)

			_, err = h.Drain(ctx, hd)
			require.NoError(t, err)
			want := []string{"a", "b"}
			if !stored {
				want = append(want, "b")
			}
			require.Equal(t, want, runs)
			m, err := sub.NextMsg(10 * time.Second)
			require.NoError(t, err)
			r, err := call.Parse(m)
			require.NoError(t, err)
			require.Equal(t, call.Reply{Seq: p.Seq, Body: []byte("re:b")}, r)
			noAnswerYet(t, nc, sub)
		})
	}
}
