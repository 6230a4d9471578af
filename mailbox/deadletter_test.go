package mailbox_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/internal/wire"
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
// (From drain's TestWire, the tests of the wire issue: a producer in
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
