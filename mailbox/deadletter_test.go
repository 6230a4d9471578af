package mailbox_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/mailbox"
	"github.com/fencepost/fencepost/queue"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// deadLetterOne drains id with a handler that fails every delivery until
// its one message is dead-lettered.
func deadLetterOne(t *testing.T, ctx context.Context, w *client.World, d *drain.Drainer, id string) {
	t.Helper()
	lease, err := w.Ownership.Claim(ctx, id, "n1", time.Minute)
	require.NoError(t, err)
	res, err := d.DrainLease(ctx, lease, func(context.Context, drain.Message) error { return errors.New("cannot handle it") })
	require.NoError(t, err)
	require.Equal(t, 1, res.DeadLettered)
}

// Likewise "fp-re-<dead letter seq>": the repost said reposted=1 and the
// mailbox stayed empty.
// (From drain's TestWire, the tests of the wire contract: a producer in
// another language must not defeat fencepost's own keys.)
func TestRepost_OwnRepostIDNotDefeatable(t *testing.T) {
	env := testutil.Start(t, testutil.Target{Name: "single"})
	ctx := testutil.Ctx(t, time.Minute)
	w, d := newWorld(t, env, world.Config{MaxDeliveries: 1})
	send(t, ctx, w, "b", "poison")
	deadLetterOne(t, ctx, w, d, "b")
	dls, err := w.Mailboxes.DeadLetters(ctx, "b", 0)
	require.NoError(t, err)
	require.Len(t, dls, 1)
	seq := strconv.FormatUint(dls[0].Seq, 10)
	// A producer of b that used fencepost's key in b's scope: it is b's
	// message and is delivered too; and a producer of a that used both
	// the old key and the scoped one (not following docs/wire.md).
	raw(t, ctx, w, wire.MailboxSubject(w.Name, "b"), "trap-b", "Nats-Msg-Id", wire.ScopedMsgID("b", "fp-re-"+seq))
	raw(t, ctx, w, wire.MailboxSubject(w.Name, "a"), "trap", "Nats-Msg-Id", "fp-re-"+seq)
	n, err := w.Mailboxes.Repost(ctx, w.Queue, "b")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	var rec testutil.Recorder
	lease, err := w.Ownership.Owner(ctx, "b")
	require.NoError(t, err)
	_, err = d.Drain(ctx, "b", lease.Node, lease.Epoch, rec.Handle)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"trap-b", "poison"}, rec.Bodies(), "the repost was taken for a duplicate of a producer's message")
	dls, err = w.Mailboxes.DeadLetters(ctx, "b", 0)
	require.NoError(t, err)
	require.Empty(t, dls)
}

// A header near 64 KiB blocked its mailbox for good (a newcomer's report):
// the broker stores a message's headers up to 64 KiB whatever its
// max_msg_size, and the dead letter, with its metadata added, went over
// (10097): a WARN every second, and every later message of the id waited
// forever. Now the dead letter is stored in two parts (the message as it
// was stored, and a record), also with headers at the very limit; it
// counts once everywhere, and repost and purge remove
// both parts.
func TestDeadLetter_HeadersNear64KiB(t *testing.T) {
	env := testutil.Start(t, testutil.Target{Name: "single"})
	// The value of one header such that the headers, as the broker counts
	// them, are 65,471 bytes (the report's) and 65,535 (the most stored).
	for _, valueLen := range []int{65_450, world.MaxStoredHeaders - len("NATS/1.0\r\n\r\nX-Big: \r\n")} {
		t.Run(strconv.Itoa(valueLen), func(t *testing.T) {
			ctx := testutil.Ctx(t, time.Minute)
			w, d := newWorld(t, env, world.Config{MaxBody: 128 << 10, MaxHeaders: 8 << 10, MaxMsgSize: 136 << 10, MaxDeliveries: 2})
			big := strings.Repeat("h", valueLen)
			raw(t, ctx, w, wire.MailboxSubject(w.Name, "x"), "poison", "X-Big", big)
			send(t, ctx, w, "x", "after")
			lease, err := w.Ownership.Claim(ctx, "x", "n1", time.Minute)
			require.NoError(t, err)
			var rec testutil.Recorder
			handler := func(ctx context.Context, m drain.Message) error {
				if string(m.Body) == "poison" {
					return errors.New("cannot handle it")
				}
				return rec.Handle(ctx, m)
			}
			res, err := d.DrainLease(ctx, lease, handler)
			require.NoError(t, err, "the dead letter of a stored message must fit")
			require.Equal(t, 1, res.DeadLettered)
			require.Equal(t, []string{"after"}, rec.Bodies(), "the next message must not wait")

			dls, err := w.Mailboxes.DeadLetters(ctx, "x", 0)
			require.NoError(t, err)
			require.Len(t, dls, 1)
			require.Equal(t, "poison", string(dls[0].Body))
			require.Equal(t, big, dls[0].Headers.Get("X-Big"))
			require.NotZero(t, dls[0].BodySeq, "stored in two parts")
			require.Equal(t, 2, dls[0].Deliveries)
			// One dead letter, counted once by stat, ls and world stat.
			st, err := w.Mailboxes.Stat(ctx, "x")
			require.NoError(t, err)
			require.EqualValues(t, 1, st.DeadLetters)
			require.Zero(t, st.Depth)
			ws, err := w.Mailboxes.WorldStat(ctx)
			require.NoError(t, err)
			require.EqualValues(t, 1, ws.DeadLetters)
			require.Zero(t, ws.Depth)
			page, err := w.Mailboxes.List(ctx, mailbox.ListOptions{Dead: true, Limit: 10})
			require.NoError(t, err)
			require.Len(t, page.Entries, 1)
			require.EqualValues(t, 1, page.Entries[0].DeadLetters)
			require.Zero(t, page.Skipped, "the body part is no id's subject")

			n, err := w.Mailboxes.Repost(ctx, w.Queue, "x")
			require.NoError(t, err)
			require.Equal(t, 1, n)
			dead := wire.DeadLetterSubject(w.Name, "x")
			require.Zero(t, stored(t, w, dead))
			require.Zero(t, stored(t, w, wire.PartSubject(dead)))
			rec = testutil.Recorder{}
			_, err = d.DrainLease(ctx, lease, rec.Handle)
			require.NoError(t, err)
			require.Equal(t, []string{"poison"}, rec.Bodies())
			require.Equal(t, big, rec.Msgs()[0].Headers.Get("X-Big"))
		})
	}
}

// A two-part dead letter whose record is refused (the id's dead letters
// are full) leaves its body part, and the next tries take it up instead
// of storing one more each: a drain tries at every pass.
func TestDeadLetter_PartTakenUp(t *testing.T) {
	env := testutil.Start(t, testutil.Target{Name: "single"})
	ctx := testutil.Ctx(t, time.Minute)
	w, d := newWorld(t, env, world.Config{MaxBody: 128 << 10, MaxHeaders: 8 << 10, MaxMsgSize: 136 << 10, MaxDeliveries: 1, MaxMsgsPerMailbox: 2})
	dead := wire.DeadLetterSubject(w.Name, "x")
	for i := range 2 { // fill the dead letters of x
		raw(t, ctx, w, dead, "old"+strconv.Itoa(i), wire.HeaderDeadSeq, "1")
	}
	raw(t, ctx, w, wire.MailboxSubject(w.Name, "x"), "poison", "X-Big", strings.Repeat("h", 65_450))
	lease, err := w.Ownership.Claim(ctx, "x", "n1", time.Minute)
	require.NoError(t, err)
	fail := func(context.Context, drain.Message) error { return errors.New("no") }
	for range 3 {
		_, err = d.DrainLease(ctx, lease, fail)
		require.ErrorIs(t, err, drain.ErrDeadLetter)
	}
	require.EqualValues(t, 1, stored(t, w, wire.PartSubject(dead)), "one body part for every try")
	_, err = w.Mailboxes.PurgeDeadLetters(ctx, "x")
	require.NoError(t, err)
	require.Zero(t, stored(t, w, wire.PartSubject(dead)), "purge removes the parts too")
	res, err := d.DrainLease(ctx, lease, fail)
	require.NoError(t, err)
	require.Equal(t, 1, res.DeadLettered)
	dls, err := w.Mailboxes.DeadLetters(ctx, "x", 0)
	require.NoError(t, err)
	require.Len(t, dls, 1)
	require.Equal(t, "poison", string(dls[0].Body))
}

// A dead letter stored in two parts (here: a body at the world's limit)
// counted dead=2 in stat and ls --dead but listed once by dlq ls (a
// newcomer's report). Its body part is on its own subject now: one everywhere.
func TestDeadLetter_TwoPartCountsOnce(t *testing.T) {
	env := testutil.Start(t, testutil.Target{Name: "single"})
	ctx := testutil.Ctx(t, time.Minute)
	w, d := newWorld(t, env, world.Config{MaxMsgSize: 4096, MaxDeliveries: 1})
	raw(t, ctx, w, wire.MailboxSubject(w.Name, "big"), strings.Repeat("b", 4096))
	deadLetterOne(t, ctx, w, d, "big")
	dls, err := w.Mailboxes.DeadLetters(ctx, "big", 0)
	require.NoError(t, err)
	require.Len(t, dls, 1)
	require.NotZero(t, dls[0].BodySeq)
	st, err := w.Mailboxes.Stat(ctx, "big")
	require.NoError(t, err)
	require.EqualValues(t, 1, st.DeadLetters, "stat")
	ws, err := w.Mailboxes.WorldStat(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, ws.DeadLetters, "world stat")
	page, err := w.Mailboxes.List(ctx, mailbox.ListOptions{Dead: true, Limit: 10})
	require.NoError(t, err)
	require.Len(t, page.Entries, 1)
	require.EqualValues(t, 1, page.Entries[0].DeadLetters, "ls --dead")
	info, err := world.Inspect(ctx, handles.Of(w).JS, w.Name, world.InspectOptions{})
	require.NoError(t, err)
	require.EqualValues(t, 1, info.DeadLetters, "world info")
	require.EqualValues(t, 1, info.DeadIDs)
	require.Zero(t, info.Depth)
	require.Zero(t, info.Mailboxes)
	n, err := w.Mailboxes.PurgeDeadLetters(ctx, "big")
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.Zero(t, stored(t, w, wire.PartSubject(wire.DeadLetterSubject(w.Name, "big"))))
}

// A producer that posted fencepost's repost key with Fencepost-Repost-Of
// before the operator's repost replaced the dead letter (a newcomer's
// report): the repost said reposted count=1 and deleted it, and only the
// forger's body was delivered. Nothing a producer writes is trusted now.
func TestRepost_ForgedRepostNotTrusted(t *testing.T) {
	env := testutil.Start(t, testutil.Target{Name: "single"})
	ctx := testutil.Ctx(t, time.Minute)
	w, d := newWorld(t, env, world.Config{MaxDeliveries: 1})
	send(t, ctx, w, "b", "poison")
	deadLetterOne(t, ctx, w, d, "b")
	dls, err := w.Mailboxes.DeadLetters(ctx, "b", 0)
	require.NoError(t, err)
	// The forgery comes first: the key in b's scope, as the Go client and
	// `send --msg-id` send it, with the repost's header.
	forged := strconv.FormatUint(dls[0].Seq, 10)
	raw(t, ctx, w, wire.MailboxSubject(w.Name, "b"), "forged", "Nats-Msg-Id", wire.ScopedMsgID("b", "fp-re-"+forged), mailbox.HeaderRepostOf, forged)
	n, err := w.Mailboxes.Repost(ctx, w.Queue, "b")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	var rec testutil.Recorder
	lease, err := w.Ownership.Owner(ctx, "b")
	require.NoError(t, err)
	_, err = d.Drain(ctx, "b", lease.Node, lease.Epoch, rec.Handle)
	require.NoError(t, err)
	require.Equal(t, []string{"forged", "poison"}, rec.Bodies(), "the repost was taken for the forger's message")
}

// A producer's key "fp-re-<N>" was swallowed as a duplicate of
// fencepost's own repost key. Fencepost's repost key is
// one no producer sends (wire.RepostMsgID).
func TestRepost_ProducerKeyNotSwallowed(t *testing.T) {
	env := testutil.Start(t, testutil.Target{Name: "single"})
	ctx := testutil.Ctx(t, time.Minute)
	w, d := newWorld(t, env, world.Config{MaxDeliveries: 1})
	send(t, ctx, w, "a", "poison")
	deadLetterOne(t, ctx, w, d, "a")
	dls, err := w.Mailboxes.DeadLetters(ctx, "a", 0)
	require.NoError(t, err)
	n, err := w.Mailboxes.Repost(ctx, w.Queue, "a")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	p, err := w.Queue.Send(ctx, "a", []byte("mine"), queue.WithMsgID("fp-re-"+strconv.FormatUint(dls[0].Seq, 10)))
	require.NoError(t, err)
	require.False(t, p.Duplicate, "a producer's key was swallowed by fencepost's repost key")
	require.EqualValues(t, 2, stored(t, w, wire.MailboxSubject(w.Name, "a")))
}

// A repost interrupted between its post and the removal of the dead
// letter, and run again inside the dedupe window, does not post twice:
// the broker answers its own key as a duplicate.
func TestRepost_InterruptedRunsOnce(t *testing.T) {
	env := testutil.Start(t, testutil.Target{Name: "single"})
	ctx := testutil.Ctx(t, time.Minute)
	w, d := newWorld(t, env, world.Config{MaxDeliveries: 1})
	send(t, ctx, w, "a", "poison")
	deadLetterOne(t, ctx, w, d, "a")
	dls, err := w.Mailboxes.DeadLetters(ctx, "a", 0)
	require.NoError(t, err)
	// The first run's post, as Repost sends it; then it stopped.
	raw(t, ctx, w, wire.MailboxSubject(w.Name, "a"), "poison", "Fencepost-From", "tester",
		"Nats-Msg-Id", wire.RepostMsgID("a", dls[0].Seq, dls[0].Died.UnixNano()))
	n, err := w.Mailboxes.Repost(ctx, w.Queue, "a")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.EqualValues(t, 1, stored(t, w, wire.MailboxSubject(w.Name, "a")), "posted twice")
	require.Zero(t, stored(t, w, wire.DeadLetterSubject(w.Name, "a")))
}

// An operator unblocks an id from the command line:
// dlq skip moves the message to the dead letters at once, with why, and
// the id's next message is delivered. It refuses what is not waiting.
func TestSkip(t *testing.T) {
	env := testutil.Start(t, testutil.Target{Name: "single"})
	ctx := testutil.Ctx(t, time.Minute)
	w, d := newWorld(t, env, world.Config{MaxDeliveries: 100})
	send(t, ctx, w, "x", "poison", "next")
	send(t, ctx, w, "y", "other")
	lease, err := w.Ownership.Claim(ctx, "x", "n1", time.Minute)
	require.NoError(t, err)
	var rec testutil.Recorder
	handler := func(ctx context.Context, m drain.Message) error {
		if string(m.Body) == "poison" {
			return errors.New("cannot handle it")
		}
		return rec.Handle(ctx, m)
	}
	// One failed delivery, committed; then the drain waits out its long
	// backoff until it is stopped.
	slow, err := drain.New(w.World, w.Ownership, drain.WithBackoff(time.Hour, time.Hour))
	require.NoError(t, err)
	dctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { _, err := slow.DrainLease(dctx, lease, handler); done <- err }()
	var st mailbox.Stat
	testutil.WaitFor(t, 10*time.Second, "a failure committed", func() bool {
		st, err = w.Mailboxes.Stat(ctx, "x")
		require.NoError(t, err)
		return st.Failures > 0
	})
	stop()
	<-done
	require.EqualValues(t, 2, st.Depth)
	failures, poison := st.Failures, st.NextSeq

	for _, c := range []struct {
		id  string
		seq uint64
	}{{"y", poison}, {"x", 999}, {"x", poison + 2}} {
		err := w.Mailboxes.Skip(ctx, c.id, c.seq)
		require.ErrorIs(t, err, mailbox.ErrNotWaiting, "%s %d", c.id, c.seq)
	}
	require.ErrorIs(t, w.Mailboxes.Skip(ctx, "x", 0), mailbox.ErrInvalidOption)
	require.NoError(t, w.Mailboxes.Skip(ctx, "x", poison))
	dls, err := w.Mailboxes.DeadLetters(ctx, "x", 0)
	require.NoError(t, err)
	require.Len(t, dls, 1)
	require.Equal(t, "poison", string(dls[0].Body))
	require.Equal(t, poison, dls[0].MailboxSeq)
	require.Equal(t, failures, dls[0].Deliveries)
	require.Contains(t, dls[0].Error, "skipped by an operator")
	require.Contains(t, dls[0].Error, "cannot handle it")
	res, err := d.DrainLease(ctx, lease, handler)
	require.NoError(t, err)
	require.Equal(t, 1, res.Acked)
	require.Equal(t, []string{"next"}, rec.Bodies())
	// Committed now: nothing to skip.
	require.ErrorIs(t, w.Mailboxes.Skip(ctx, "x", poison+1), mailbox.ErrNotWaiting)
}
