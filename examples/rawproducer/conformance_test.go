package main

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/purge"
	"github.com/fencepost/fencepost/queue"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// TestConformance is the wire conformance test: a producer that knows only
// docs/wire.md (post, above: plain nats.go, no fencepost import) posts
// canonical and non-canonical tokens, headers in other cases, keys to two
// mailboxes, bodies at and over the size limit, into a full mailbox and to
// a world that does not exist. Then fencepost drains: every message the
// broker stored is delivered, dead-lettered with a reason, or surfaced as
// unroutable in stat and moved aside with its reason. Nothing else.
func TestConformance(t *testing.T) {
	env := testutil.Start(t, testutil.Target{Name: "single"})
	w := env.World(t, world.Config{MaxMsgSize: 4096, MaxMsgsPerMailbox: 10, MaxDeliveries: 2})
	ctx := testutil.Ctx(t, 2*time.Minute)
	nc, err := nats.Connect(env.URL)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)

	stored := map[uint64]string{} // seq -> what, for every message the broker stored
	ok := func(p Post, what string) Outcome {
		t.Helper()
		out, err := post(ctx, js, p)
		require.NoError(t, err, what)
		if !out.Duplicate {
			stored[out.Seq] = what
		}
		return out
	}
	p := func(id, body string) Post { return Post{World: w.Name, ID: id, Body: []byte(body)} }

	// Canonical tokens of ids with dots, wildcards, spaces, non-ASCII.
	for _, id := range []string{"order.42", "*", ">", "a b", "日本", strings.Repeat("é", 128)} {
		q := p(id, "hello "+id)
		q.From = "shop"
		q.Headers = map[string]string{"X-Trace": "t-" + id}
		ok(q, "canonical "+id)
	}
	// Fencepost's header in another case; a sender that breaks the rule.
	lower := p("case", "lower-case sender")
	lower.Headers = map[string]string{"fencepost-from": "billing"}
	ok(lower, "lower-case Fencepost-From")
	long := p("case", "sender too long")
	long.From = strings.Repeat("s", 300)
	ok(long, "long sender")

	// Duplicate scope: one mailbox.
	k1 := p("order.42", "keyed")
	k1.Key = "same-key"
	first := ok(k1, "key to order.42")
	k2 := p("x", "keyed")
	k2.Key = "same-key"
	require.False(t, ok(k2, "same key to x").Duplicate, "a key is scoped to its mailbox")
	again := ok(k2, "same key to x again")
	require.True(t, again.Duplicate)
	require.NotEqual(t, first.Seq, again.Seq)
	// A lower-case nats-msg-id is the broker's business: not deduplicated.
	for range 2 {
		lc := p("lc", "lower-case msg id")
		lc.Headers = map[string]string{"nats-msg-id": encodeID("lc") + ":k"}
		ok(lc, "lower-case nats-msg-id")
	}

	// Size: at the limit is stored (and dead-letterable), over it is not.
	at := p("big", "")
	at.From = "shop"
	at.Body = []byte(strings.Repeat("b", 4096-queue.HeaderSize(at.msg().Header)))
	ok(at, "body at the limit")
	over := at
	over.Body = append([]byte("o"), at.Body...)
	_, err = post(ctx, js, over)
	require.ErrorIs(t, err, ErrTooLarge)

	// Full: the mailbox limit is 10 messages.
	for range 10 {
		ok(p("full", "fill"), "fill")
	}
	_, err = post(ctx, js, p("full", "one too many"))
	require.ErrorIs(t, err, ErrFull)

	// Unknown world.
	_, err = post(ctx, js, Post{World: "nosuchworld", ID: "a", Body: []byte("x")})
	require.ErrorIs(t, err, ErrUnknownWorld)

	// A poison message: dead-lettered after max_deliveries.
	ok(p("poison", "poison"), "poison")

	// Non-canonical tokens: the broker stores them; no id is theirs.
	bad := []string{"b3JkZXIuNDK", "b3JkZXIuNDI=", "w7w+Pw", "__8", "*", "Y", strings.Repeat("eHh4", 90)}
	for _, tok := range bad {
		ack, err := js.Publish(ctx, "fp."+w.Name+".mb."+tok, []byte("stray"))
		require.NoError(t, err, tok)
		stored[ack.Sequence] = "non-canonical " + tok
	}

	d, err := drain.New(w.World, w.Ownership, drain.WithBackoff(time.Millisecond, 10*time.Millisecond))
	require.NoError(t, err)
	pg, err := purge.New(w.World)
	require.NoError(t, err)
	ws, err := w.Mailboxes.WorldStat(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(len(bad)), ws.Unroutable, "stat surfaces unroutable messages before any sweep")

	// Drain every id.
	var mu sync.Mutex
	delivered := map[uint64]drain.Message{}
	handler := func(_ context.Context, m drain.Message) error {
		if string(m.Body) == "poison" {
			return errors.New("cannot parse")
		}
		mu.Lock()
		delivered[m.Seq] = m
		mu.Unlock()
		return nil
	}
	ids := []string{"order.42", "*", ">", "a b", "日本", strings.Repeat("é", 128), "case", "x", "lc", "big", "full", "poison"}
	for _, id := range ids {
		lease, err := w.Ownership.Claim(ctx, id, "conformance", time.Minute)
		require.NoError(t, err, id)
		_, err = d.DrainLease(ctx, lease, handler)
		require.NoError(t, err, id)
	}
	sw, err := pg.SweepUnroutable(ctx)
	require.NoError(t, err)
	require.Equal(t, len(bad), sw.Moved)
	require.Zero(t, sw.Left)

	// Every stored message has exactly one fate.
	fate := map[uint64]string{}
	setFate := func(seq uint64, f string) {
		require.Empty(t, fate[seq], "message %d has two fates: %s and %s", seq, fate[seq], f)
		fate[seq] = f
	}
	for seq := range delivered {
		setFate(seq, "delivered")
	}
	for _, id := range ids {
		dls, err := w.Mailboxes.DeadLetters(ctx, id, 0)
		require.NoError(t, err)
		for _, dl := range dls {
			require.Equal(t, "cannot parse", dl.Error)
			setFate(dl.MailboxSeq, "dead-lettered")
		}
	}
	un, err := w.Mailboxes.Unroutable(ctx, 0)
	require.NoError(t, err)
	for _, dl := range un {
		require.True(t, strings.HasPrefix(dl.Error, "unroutable: "), dl.Error)
		setFate(dl.MailboxSeq, "unroutable")
	}
	for seq, what := range stored {
		require.NotEmpty(t, fate[seq], "message %d (%s) was stored and has no fate", seq, what)
	}
	require.Len(t, fate, len(stored), "a fate for a message nobody stored")
	ws, err = w.Mailboxes.WorldStat(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(len(bad)), ws.Unroutable)
	require.Equal(t, uint64(1), ws.DeadLetters)

	// What the handlers saw of the headers.
	for seq, m := range delivered {
		switch stored[seq] {
		case "lower-case Fencepost-From":
			require.Equal(t, "billing", m.From)
		case "long sender":
			require.Empty(t, m.From)
		case "canonical order.42":
			require.Equal(t, "shop", m.From)
			require.Equal(t, "t-order.42", m.Headers.Get("X-Trace"))
		}
		require.Empty(t, m.Headers.Get("nats-msg-id"), "a reserved header reached the handler")
	}
}
