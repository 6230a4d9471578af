package mailbox_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/mailbox"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

func listIDs(p mailbox.ListPage) []string {
	out := []string{}
	for _, e := range p.Entries {
		out = append(out, e.ID)
	}
	return out
}

// TestList: each filter, their intersections, the default union, the
// states and counts of each entry, odd ids, and what names no id.
func TestList(t *testing.T) {
	for _, tg := range testutil.Targets() {
		t.Run(tg.Name, func(t *testing.T) {
			env := testutil.Start(t, tg)
			ctx := testutil.Ctx(t, time.Minute)
			w, d := newWorld(t, env, world.Config{MaxDeliveries: 1})
			odd := "日本.* x>/"
			claim := func(id, node string) {
				_, err := w.Ownership.Claim(ctx, id, node, time.Minute)
				require.NoError(t, err)
			}
			claim("a", "n1")
			send(t, ctx, w, "a", "1", "2")
			claim("b", "n2")
			send(t, ctx, w, "c", "1") // mail, no record
			claim(odd, "n1")
			send(t, ctx, w, odd, "1")
			claim("e", "n1")
			require.NoError(t, w.Ownership.Release(ctx, "e", "n1"))
			// d: held by n1, its one message dead-lettered.
			send(t, ctx, w, "d", "poison")
			lease, err := w.Ownership.Claim(ctx, "d", "n1", time.Minute)
			require.NoError(t, err)
			res, err := d.DrainLease(ctx, lease, func(context.Context, drain.Message) error { return errors.New("no") })
			require.NoError(t, err)
			require.Equal(t, 1, res.DeadLettered)
			// A message on a mailbox subject whose token is no id's.
			unroutable := strings.TrimSuffix(wire.MailboxSubject(w.Name, "x"), wire.EncodeID("x")) + "b3JkZXIuNDK"
			_, err = handles.Of(w).JS.Publish(ctx, unroutable, []byte("lost"))
			require.NoError(t, err)

			list := func(o mailbox.ListOptions) mailbox.ListPage {
				t.Helper()
				if o.Limit == 0 {
					o.Limit = 100
				}
				p, err := w.Mailboxes.List(ctx, o)
				require.NoError(t, err, "%+v", o)
				require.False(t, p.More, "%+v", o)
				require.Equal(t, 1, p.Skipped, "%+v: the unroutable subject", o)
				return p
			}
			all := list(mailbox.ListOptions{})
			require.Equal(t, []string{"a", "b", "c", "d", "e", odd}, listIDs(all))
			byID := map[string]mailbox.ListEntry{}
			for _, e := range all.Entries {
				require.NoError(t, e.Err, e.ID)
				byID[e.ID] = e
			}
			require.True(t, byID["a"].Owner.Held)
			require.Equal(t, "n1", byID["a"].Owner.Node)
			require.EqualValues(t, 2, byID["a"].Depth)
			require.EqualValues(t, 0, byID["a"].DeadLetters)
			require.False(t, byID["c"].Owner.Held)
			require.EqualValues(t, 0, byID["c"].Owner.Epoch, "never owned")
			require.EqualValues(t, 1, byID["c"].Depth)
			require.EqualValues(t, 1, byID["d"].DeadLetters)
			require.EqualValues(t, 0, byID["d"].Depth)
			require.False(t, byID["e"].Owner.Held)
			require.EqualValues(t, 1, byID["e"].Owner.Epoch, "the last epoch")
			require.EqualValues(t, 1, byID[odd].Depth)

			for _, c := range []struct {
				o    mailbox.ListOptions
				want []string
			}{
				{mailbox.ListOptions{WithMail: true}, []string{"a", "c", odd}},
				{mailbox.ListOptions{Dead: true}, []string{"d"}},
				{mailbox.ListOptions{HeldBy: "n1"}, []string{"a", "d", odd}},
				{mailbox.ListOptions{HeldBy: "n2"}, []string{"b"}},
				{mailbox.ListOptions{HeldBy: "nobody"}, []string{}},
				{mailbox.ListOptions{HeldBy: "n1", WithMail: true}, []string{"a", odd}},
				{mailbox.ListOptions{HeldBy: "n1", Dead: true}, []string{"d"}},
				{mailbox.ListOptions{WithMail: true, Dead: true}, []string{}},
				{mailbox.ListOptions{After: "b"}, []string{"c", "d", "e", odd}},
				{mailbox.ListOptions{After: "a", WithMail: true}, []string{"c", odd}},
				{mailbox.ListOptions{After: odd}, []string{}},
			} {
				p := list(c.o)
				require.Equal(t, c.want, listIDs(p), "%+v", c.o)
				for _, e := range p.Entries {
					require.Equal(t, byID[e.ID], e, "%+v: %q as in the full listing", c.o, e.ID)
				}
			}
		})
	}
}

// TestList_Paging: 25 ids (records, mail or both) listed 10 at a time:
// three pages, each but the last saying where to go on, together every id
// once, in order.
func TestList_Paging(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	ctx := testutil.Ctx(t, time.Minute)
	w, _ := newWorld(t, env, world.Config{})
	var want []string
	for i := range 25 {
		id := fmt.Sprintf("id.%02d", i)
		want = append(want, id)
		if i%3 != 0 {
			_, err := w.Ownership.Claim(ctx, id, "n1", time.Minute)
			require.NoError(t, err)
		}
		if i%3 == 0 || i%2 == 0 {
			send(t, ctx, w, id, "m")
		}
	}
	var got []string
	after := ""
	for page := 1; ; page++ {
		p, err := w.Mailboxes.List(ctx, mailbox.ListOptions{Limit: 10, After: after})
		require.NoError(t, err)
		got = append(got, listIDs(p)...)
		if page < 3 {
			require.Len(t, p.Entries, 10)
			require.True(t, p.More)
			require.Equal(t, p.Entries[9].ID, p.Next)
			after = p.Next
			continue
		}
		require.Len(t, p.Entries, 5)
		require.False(t, p.More)
		require.Empty(t, p.Next)
		break
	}
	require.Equal(t, want, got)

	// Exactly a page: not cut.
	p, err := w.Mailboxes.List(ctx, mailbox.ListOptions{Limit: 25})
	require.NoError(t, err)
	require.Len(t, p.Entries, 25)
	require.False(t, p.More)
	// --with-mail pages read each listed record alone.
	p, err = w.Mailboxes.List(ctx, mailbox.ListOptions{Limit: 5, WithMail: true})
	require.NoError(t, err)
	require.Equal(t, []string{"id.00", "id.02", "id.03", "id.04", "id.06"}, listIDs(p))
	require.True(t, p.More)
	require.False(t, p.Entries[0].Owner.Held, "id.00 has no record")
	require.True(t, p.Entries[1].Owner.Held)
}

// TestList_CorruptRecord: a record that does not decode is listed with its
// error, by the scan and by the per-id read; --held-by cannot count it.
func TestList_CorruptRecord(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	ctx := testutil.Ctx(t, time.Minute)
	w, _ := newWorld(t, env, world.Config{})
	_, err := handles.Of(w).KV.Put(ctx, wire.RecordKey("bad"), []byte(`{"v":1,"node":"n1","epoch":0,"state":"held"}`))
	require.NoError(t, err)
	send(t, ctx, w, "bad", "m")
	for _, o := range []mailbox.ListOptions{{Limit: 10}, {Limit: 10, WithMail: true}} {
		p, err := w.Mailboxes.List(ctx, o)
		require.NoError(t, err)
		require.Len(t, p.Entries, 1, "%+v", o)
		require.ErrorIs(t, p.Entries[0].Err, wire.ErrCorruptRecord, "%+v", o)
		require.EqualValues(t, 1, p.Entries[0].Depth)
	}
	p, err := w.Mailboxes.List(ctx, mailbox.ListOptions{Limit: 10, HeldBy: "n1"})
	require.NoError(t, err)
	require.Empty(t, p.Entries)
}

// TestList_Refused: bad options are refused before anything is read.
func TestList_Refused(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	ctx := testutil.Ctx(t, time.Minute)
	w, _ := newWorld(t, env, world.Config{})
	for _, c := range []struct {
		o    mailbox.ListOptions
		want error
	}{
		{mailbox.ListOptions{}, mailbox.ErrInvalidOption},
		{mailbox.ListOptions{Limit: -1}, mailbox.ErrInvalidOption},
		{mailbox.ListOptions{Limit: 1, HeldBy: "\xff"}, wire.ErrInvalidNode},
		{mailbox.ListOptions{Limit: 1, HeldBy: strings.Repeat("n", 257)}, wire.ErrInvalidNode},
		{mailbox.ListOptions{Limit: 1, After: "\xff"}, wire.ErrInvalidID},
	} {
		_, err := w.Mailboxes.List(ctx, c.o)
		require.ErrorIs(t, err, c.want, "%+v", c.o)
	}
}
