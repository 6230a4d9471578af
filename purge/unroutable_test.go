package purge_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/purge"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// The unroutable tests of the wire contract (drain's TestWire): what a
// producer in another language stores on a subject no id encodes to must
// be surfaced and moved aside, never lost. They run on the single node:
// they are about what the broker stores, not about replication.
var unroutableCases = []struct {
	name string
	fn   func(t *testing.T, env *testutil.Env)
}{
	{"NonCanonicalTokens_Surfaced_ThenMoved", testUnroutable},
	{"UnroutableStoreFull_StaysCounted", testUnroutableFull},
	{"Unroutable_MovedAsPosted", testFollowUnroutable},
	{"Unroutable_ForgedSequence_MovesItself", testFollowUnroutableForged},
	{"LiteralWildcardSubjects_Moved", testFollowLiteralWildcards},
	{"UnroutableLeft_TriedAgain", testFollowRetries},
}

func TestUnroutable(t *testing.T) {
	env := testutil.Start(t, testutil.Target{Name: "single"})
	for _, c := range unroutableCases {
		t.Run(c.name, func(t *testing.T) { c.fn(t, env) })
	}
}

// Messages on subjects no id encodes to are counted in stat at once, and
// the sweep moves each aside with its reason; a lenient decoder used to
// read "b3JkZXIuNDK" as order.42.
func testUnroutable(t *testing.T, env *testutil.Env) {
	ctx := testutil.Ctx(t, time.Minute)
	w, _ := newWorld(t, env, world.Config{})
	p := newPurger(t, w)
	send(t, ctx, w, "order.42", "routable")
	// "AA" decodes to a NUL byte, which no id holds (a newcomer's report):
	// the Go client refuses such an id and stores nothing.
	_, err := w.Queue.Send(ctx, "\x00", []byte("x"))
	require.ErrorIs(t, err, wire.ErrInvalidID)
	require.ErrorContains(t, err, "NUL")
	require.Zero(t, stored(t, w, "fp."+w.Name+".mb.AA"), "stored for a refused id")
	bad := []string{"b3JkZXIuNDK", "b3JkZXIuNDI=", "w7w+Pw", "__8", "*", strings.Repeat("eHh4", 90), "AA"}
	for _, tok := range bad {
		raw(t, ctx, w, "fp."+w.Name+".mb."+tok, "lost? "+tok[:min(len(tok), 12)], "Fencepost-From", "js")
	}
	ws, err := w.Mailboxes.WorldStat(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(len(bad)), ws.Unroutable)
	require.Equal(t, 1, ws.IDs)

	sw, err := p.SweepUnroutable(ctx)
	require.NoError(t, err)
	require.Equal(t, len(bad), sw.Moved)
	require.Zero(t, sw.Left)
	for _, tok := range bad {
		require.Zero(t, stored(t, w, "fp."+w.Name+".mb."+tok), tok)
	}
	require.Equal(t, uint64(1), stored(t, w, wire.MailboxSubject(w.Name, "order.42")), "the sweep touched a routable mailbox")
	// Again: nothing more to move, nothing stored twice.
	sw, err = p.SweepUnroutable(ctx)
	require.NoError(t, err)
	require.Zero(t, sw.Moved)

	un, err := w.Mailboxes.Unroutable(ctx, 0)
	require.NoError(t, err)
	require.Len(t, un, len(bad))
	for _, dl := range un {
		require.True(t, strings.HasPrefix(dl.Error, "unroutable: "), dl.Error)
		require.True(t, strings.HasPrefix(string(dl.Body), "lost? "))
		require.Equal(t, "js", dl.From)
		require.NotZero(t, dl.MailboxSeq)
		require.True(t, strings.HasPrefix(dl.Subject, "fp."+w.Name+".mb."), dl.Subject)
	}
	ws, err = w.Mailboxes.WorldStat(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(len(bad)), ws.Unroutable, "moved messages stay counted")
	require.Zero(t, ws.DeadLetters)
	info, err := world.Inspect(ctx, handles.Of(w).JS, w.Name, world.InspectOptions{})
	require.NoError(t, err)
	require.Equal(t, uint64(len(bad)), info.Unroutable)
	require.Equal(t, uint64(1), info.Depth)
	require.Equal(t, uint64(1), info.Mailboxes)
}

// What fencepostd runs instead of sweeping: one follower per world moves
// each unroutable message aside as it is stored (one posted before it
// started too), leaves routable mail alone, and a follower started again
// over the same stream stores nothing twice.
func testFollowUnroutable(t *testing.T, env *testutil.Env) {
	ctx := testutil.Ctx(t, time.Minute)
	w, _ := newWorld(t, env, world.Config{})
	p := newPurger(t, w)
	send(t, ctx, w, "order.42", "routable")
	raw(t, ctx, w, "fp."+w.Name+".mb.__8", "before", "Fencepost-From", "js")
	follow := func() (stop func()) {
		fctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- p.FollowUnroutable(fctx) }()
		return func() { cancel(); require.NoError(t, <-done) }
	}
	stop := follow()
	bad := []string{"__8", "b3JkZXIuNDK", "*", strings.Repeat("eHh4", 90)}
	for _, tok := range bad[1:] {
		raw(t, ctx, w, "fp."+w.Name+".mb."+tok, "after", "Fencepost-From", "js")
	}
	testutil.WaitFor(t, 30*time.Second, "every unroutable message moved", func() bool {
		for _, tok := range bad {
			if stored(t, w, "fp."+w.Name+".mb."+tok) != 0 {
				return false
			}
		}
		return true
	})
	stop()
	require.Equal(t, uint64(1), stored(t, w, wire.MailboxSubject(w.Name, "order.42")), "the follower touched a routable mailbox")
	stop = follow()
	raw(t, ctx, w, "fp."+w.Name+".mb.w7w+Pw", "later", "Fencepost-From", "js")
	testutil.WaitFor(t, 30*time.Second, "the next one moved", func() bool { return stored(t, w, "fp."+w.Name+".mb.w7w+Pw") == 0 })
	stop()
	un, err := w.Mailboxes.Unroutable(ctx, 0)
	require.NoError(t, err)
	require.Len(t, un, len(bad)+1, "each moved once")
	for _, dl := range un {
		require.True(t, strings.HasPrefix(dl.Error, "unroutable: "), dl.Error)
		require.Equal(t, "js", dl.From)
	}
}

// A producer's own Nats-Sequence and Nats-Subject on an unroutable post
// (the broker stores any header) name a routable message: the follower
// moves the unroutable post aside and leaves that message where it is.
// Read with nats.go's GetMsg, the follower removed the routable one.
func testFollowUnroutableForged(t *testing.T, env *testutil.Env) {
	ctx := testutil.Ctx(t, time.Minute)
	w, _ := newWorld(t, env, world.Config{})
	p := newPurger(t, w)
	routable := raw(t, ctx, w, wire.MailboxSubject(w.Name, "order.42"), "routable")
	fctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.FollowUnroutable(fctx) }()
	bad := "fp." + w.Name + ".mb.__8"
	raw(t, ctx, w, bad, "forged", "Nats-Sequence", strconv.FormatUint(routable, 10), "Nats-Subject", wire.MailboxSubject(w.Name, "order.42"))
	testutil.WaitFor(t, 30*time.Second, "the unroutable post moved", func() bool { return stored(t, w, bad) == 0 })
	cancel()
	require.NoError(t, <-done)
	require.Equal(t, uint64(1), stored(t, w, wire.MailboxSubject(w.Name, "order.42")), "the routable message the forged header named was removed")
	un, err := w.Mailboxes.Unroutable(ctx, 0)
	require.NoError(t, err)
	require.Len(t, un, 1)
	require.Equal(t, "forged", string(un[0].Body))
}

// The unroutable store is one subject with the mailbox limit: what does
// not fit stays where it is, still counted, and moves once there is room.
func testUnroutableFull(t *testing.T, env *testutil.Env) {
	ctx := testutil.Ctx(t, time.Minute)
	w, _ := newWorld(t, env, world.Config{MaxMsgsPerMailbox: 2})
	p := newPurger(t, w)
	bad := []string{"b3JkZXIuNDK", "w7w+Pw", "__8"}
	for _, tok := range bad {
		raw(t, ctx, w, "fp."+w.Name+".mb."+tok, "stray")
	}
	sw, err := p.SweepUnroutable(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, sw.Moved)
	require.Equal(t, 1, sw.Left)
	ws, err := w.Mailboxes.WorldStat(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(3), ws.Unroutable, "the one left is still counted")
	un, err := w.Mailboxes.Unroutable(ctx, 0)
	require.NoError(t, err)
	require.Len(t, un, 2)
	for _, dl := range un { // make room: an operator removes what was read
		require.NoError(t, handles.Of(w).Mailbox.DeleteMsg(ctx, dl.Seq))
	}
	sw, err = p.SweepUnroutable(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, sw.Moved)
	require.Zero(t, sw.Left)
}

// A post to the literal subject fp.<w>.mb.> was stranded (a newcomer's
// report): the stream stores it, but the follower's consumer, filtered on
// fp.<w>.mb.*, was never given it, so while other mailboxes held mail it
// was never moved, not after a restart either: stat counted unroutable=1,
// dlq ls --unroutable listed nothing. It is moved like any unroutable
// message, posted before the follower starts or while it runs.
func testFollowLiteralWildcards(t *testing.T, env *testutil.Env) {
	ctx := testutil.Ctx(t, time.Minute)
	w, _ := newWorld(t, env, world.Config{})
	p := newPurger(t, w)
	gt, star := "fp."+w.Name+".mb.>", "fp."+w.Name+".mb.*"
	send(t, ctx, w, "order.42", "routable")
	raw(t, ctx, w, gt, "before", "Fencepost-From", "js")
	send(t, ctx, w, "order.43", "routable")
	fctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.FollowUnroutable(fctx) }()
	raw(t, ctx, w, star, "while")
	raw(t, ctx, w, gt, "while")
	send(t, ctx, w, "order.44", "routable")
	testutil.WaitFor(t, 30*time.Second, "the literal wildcard posts moved", func() bool {
		return stored(t, w, gt) == 0 && stored(t, w, star) == 0
	})
	cancel()
	require.NoError(t, <-done)
	for _, id := range []string{"order.42", "order.43", "order.44"} {
		require.Equal(t, uint64(1), stored(t, w, wire.MailboxSubject(w.Name, id)), "the follower touched a routable mailbox")
	}
	un, err := w.Mailboxes.Unroutable(ctx, 0)
	require.NoError(t, err)
	require.Len(t, un, 3)
	subjects := map[string]int{}
	for _, dl := range un {
		subjects[dl.Subject]++
	}
	require.Equal(t, map[string]int{gt: 2, star: 1}, subjects)
	ws, err := w.Mailboxes.WorldStat(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 3, ws.Unroutable)
	require.EqualValues(t, 3, ws.Depth)
}

// Unroutable messages that did not fit in their store (full) were tried
// again only at fencepostd's next start (a newcomer's report): the follower
// tries again every retry interval, and moves them once there is room
// (here: after dlq purge --unroutable).
func testFollowRetries(t *testing.T, env *testutil.Env) {
	ctx := testutil.Ctx(t, time.Minute)
	w, _ := newWorld(t, env, world.Config{MaxMsgsPerMailbox: 2})
	p, err := purge.New(w.World, purge.WithRetry(50*time.Millisecond))
	require.NoError(t, err)
	fctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.FollowUnroutable(fctx) }()
	bad := []string{"b3JkZXIuNDK", "w7w+Pw", "__8"}
	for _, tok := range bad {
		raw(t, ctx, w, "fp."+w.Name+".mb."+tok, "stray "+tok)
	}
	testutil.WaitFor(t, 30*time.Second, "two moved, the store full", func() bool {
		return stored(t, w, wire.UnroutableSubject(w.Name)) == 2
	})
	n, err := w.Mailboxes.PurgeUnroutable(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	testutil.WaitFor(t, 30*time.Second, "the one left moved without a restart", func() bool {
		for _, tok := range bad {
			if stored(t, w, "fp."+w.Name+".mb."+tok) != 0 {
				return false
			}
		}
		return true
	})
	cancel()
	require.NoError(t, <-done)
	un, err := w.Mailboxes.Unroutable(ctx, 0)
	require.NoError(t, err)
	require.Len(t, un, 1)
}
