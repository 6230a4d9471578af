package worker_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/worker"
	"github.com/fencepost/fencepost/world"
)

// commitWithoutPurge leaves id as a commit to cursor seq leaves it until
// its holding's purge runs (half a second later): the cursor stored, the
// messages still in the mailbox. The cursor is written to the bucket
// directly, so no purge follows and the test is not a race against one.
func commitWithoutPurge(t *testing.T, ctx context.Context, w *client.World, id string, seq uint64) {
	t.Helper()
	b, err := wire.EncodeCursor(wire.Cursor{V: 1, Seq: seq})
	require.NoError(t, err)
	_, err = handles.Of(w).KV.Put(ctx, wire.CursorKey(id), b)
	require.NoError(t, err)
}

// post posts n messages to id and returns the last one's sequence.
func post(t *testing.T, ctx context.Context, w *client.World, id string, n int) uint64 {
	t.Helper()
	var last uint64
	for i := range n {
		last = testutil.Publish(t, ctx, w, wire.MailboxSubject(w.Name, id), fmt.Sprint(id, " ", i))
	}
	return last
}

// TestUncommitted: of the ids a scan lists with messages stored, the
// filter keeps exactly those with a message no stored cursor covers, and
// names the others with their last message, over more ids than one read
// names (jsapi.MaxMultiLast); it keeps every id of a read whose answer
// the size bound cut, or that came back empty.
func TestUncommitted(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{Partitions: 8})
	ctx := testutil.Ctx(t, 2*time.Minute)
	wk, err := w.NewWorker(worker.Config{Node: "a", TTL: time.Second}, func(context.Context, client.Message) error { return nil })
	require.NoError(t, err)

	var ids, want []string
	committed := map[string]uint64{}
	// Every message committed: the cursor at the last one, or past it
	// (a cursor names the last message handed out of the id's own,
	// whatever came after it on other subjects).
	last := post(t, ctx, w, "covered", 3)
	commitWithoutPurge(t, ctx, w, "covered", last)
	ids, committed["covered"] = append(ids, "covered"), last
	last = post(t, ctx, w, "past", 2)
	post(t, ctx, w, "other", 1)
	commitWithoutPurge(t, ctx, w, "past", last+1)
	ids, committed["past"] = append(ids, "past"), last
	// The last message not committed.
	last = post(t, ctx, w, "behind", 3)
	commitWithoutPurge(t, ctx, w, "behind", last-1)
	ids, want = append(ids, "behind"), append(want, "behind")
	// No cursor, a deleted one, one that does not decode.
	post(t, ctx, w, "fresh", 1)
	ids, want = append(ids, "fresh"), append(want, "fresh")
	last = post(t, ctx, w, "deleted", 1)
	commitWithoutPurge(t, ctx, w, "deleted", last)
	require.NoError(t, handles.Of(w).KV.Delete(ctx, wire.CursorKey("deleted")))
	ids, want = append(ids, "deleted"), append(want, "deleted")
	last = post(t, ctx, w, "garbage", 1)
	_, err = handles.Of(w).KV.Put(ctx, wire.CursorKey("garbage"), []byte(fmt.Sprintf(`{"v":1,"seq":%d`, last)))
	require.NoError(t, err)
	ids, want = append(ids, "garbage"), append(want, "garbage")
	// Purged since the listing: nothing stored at all, in neither list.
	last = post(t, ctx, w, "gone", 2)
	require.NoError(t, jsapi.Purge(ctx, handles.Of(w).JS.Conn(), wire.MailboxStream(w.Name), wire.MailboxSubject(w.Name, "gone"), last+1))
	ids = append(ids, "gone")
	// More ids than one read names: every other one committed.
	for i := range jsapi.MaxMultiLast + 200 {
		id := fmt.Sprint("bulk-", i)
		last := post(t, ctx, w, id, 1)
		ids = append(ids, id)
		if i%2 == 0 {
			commitWithoutPurge(t, ctx, w, id, last)
			committed[id] = last
		} else {
			want = append(want, id)
		}
	}

	keep, gotCommitted := worker.Uncommitted(wk, ctx, slices.Clone(ids))
	slices.Sort(keep)
	slices.Sort(want)
	require.Equal(t, want, keep)
	require.Equal(t, committed, gotCommitted)

	// An answer cut by the size bound (here after its first message)
	// keeps every id of its read, committed or not.
	worker.SetScanReadBytes(t, 1)
	keep, gotCommitted = worker.Uncommitted(wk, ctx, []string{"covered", "past", "behind"})
	require.ElementsMatch(t, []string{"covered", "past", "behind"}, keep)
	require.Empty(t, gotCommitted)
	// A read whose answer is empty proves nothing: the server answers
	// the same when the first message it found fails to load.
	worker.SetScanReadBytes(t, 1<<20)
	keep, gotCommitted = worker.Uncommitted(wk, ctx, []string{"gone"})
	require.Equal(t, []string{"gone"}, keep)
	require.Empty(t, gotCommitted)
}

// TestScan_CommittedMail: a worker's scan (at its start, and every few
// periods) claims an id whose stored messages are all committed no more
// than an idle one (docs/design/partitions.md, "The scan's filter"), and removes those
// messages once the cursor is older than scanPurgeAfter, as the drain of
// a claim did: nothing else would (the holder that committed them
// crashed before its purge, say). An id with an uncommitted message it
// claims and delivers as before. A younger cursor's messages are left
// to its holder, and on a world whose server purges to fencepostd.
func TestScan_CommittedMail(t *testing.T) {
	for _, tc := range []struct {
		name   string
		purge  world.PurgeMode
		after  time.Duration
		purged bool
	}{
		{"owner", world.PurgeByOwner, 0, true},
		{"young", world.PurgeByOwner, time.Hour, false},
		{"server", world.PurgeByServer, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			worker.SetScanPurgeAfter(t, tc.after)
			env := testutil.Start(t, testutil.Targets()[0])
			w := env.World(t, world.Config{Partitions: 8, Purge: tc.purge})
			ctx := testutil.Ctx(t, 2*time.Minute)
			last := post(t, ctx, w, "covered", 2)
			commitWithoutPurge(t, ctx, w, "covered", last)
			last = post(t, ctx, w, "pending", 2)
			commitWithoutPurge(t, ctx, w, "pending", last-1) // the second not yet

			rec := &testutil.Recorder{}
			wk, err := w.NewWorker(worker.Config{Node: "a", TTL: time.Second, Scan: 50 * time.Millisecond}, rec.Handle)
			require.NoError(t, err)
			rctx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- wk.Run(rctx) }()
			defer func() {
				stop()
				require.NoError(t, <-done)
			}()
			testutil.WaitFor(t, time.Minute, "the pending message delivered", func() bool { return len(rec.Msgs()) >= 1 })
			// The start scan, and at least two backstop scans after it,
			// ended.
			testutil.WaitFor(t, time.Minute, "three scans", func() bool { return worker.ScansDone(wk) >= 3 })
			require.Equal(t, []string{"pending 1"}, rec.Bodies())
			_, err = handles.Of(w).KV.Get(ctx, wire.RecordKey("covered"))
			require.Truef(t, errors.Is(err, jetstream.ErrKeyNotFound), "the committed id was claimed: %v", err)
			e, err := handles.Of(w).KV.Get(ctx, wire.RecordKey("pending"))
			require.NoError(t, err)
			require.True(t, strings.Contains(string(e.Value()), `"a"`), "pending's record: %s", e.Value())
			covered := wire.MailboxSubject(w.Name, "covered")
			if !tc.purged {
				require.EqualValues(t, 2, testutil.Stored(t, w, covered), "the scan purged")
				require.Zero(t, worker.ScanPurges(wk))
				return
			}
			testutil.WaitFor(t, time.Minute, "the committed messages purged", func() bool { return testutil.Stored(t, w, covered) == 0 })
			require.Positive(t, worker.ScanPurges(wk))
		})
	}
}
