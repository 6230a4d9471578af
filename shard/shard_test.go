package shard_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/worker"
	"github.com/fencepost/fencepost/world"
)

func TestMain(m *testing.M) { testutil.VerifyNoLeaks(m) }

// ledger records every handler call.
type ledger struct {
	mu    sync.Mutex
	calls map[string][]drain.Message
	n     int
}

func newLedger() *ledger { return &ledger{calls: map[string][]drain.Message{}} }

func (l *ledger) handle(_ context.Context, m drain.Message) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls[m.ID] = append(l.calls[m.ID], m)
	l.n++
	return nil
}

func (l *ledger) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

// onceInOrder requires that each id of want was handed each of its
// messages (stream sequences, in posting order) once, in that order.
func (l *ledger) onceInOrder(t *testing.T, want map[string][]uint64) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, seqs := range want {
		var got []uint64
		for _, m := range l.calls[id] {
			got = append(got, m.Seq)
		}
		require.Equal(t, seqs, got, "id %s: each message once, in order", id)
	}
}

// pool runs n workers of w with handler h until the test ends.
func pool(t testing.TB, w *client.World, n int, ttl time.Duration, h drain.Handler) (stop func(i int)) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	cancels := make([]context.CancelFunc, n)
	for i := range n {
		wk, err := w.NewWorker(worker.Config{Node: fmt.Sprint("node-", i), TTL: ttl, Log: testLog()}, h)
		require.NoError(t, err)
		wctx, wcancel := context.WithCancel(ctx)
		cancels[i] = wcancel
		wg.Go(func() { require.NoError(t, wk.Run(wctx)) })
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
	return func(i int) { cancels[i]() }
}

func testLog() *slog.Logger {
	if os.Getenv("FENCEPOST_TEST_LOG") != "" {
		return slog.Default()
	}
	return slog.New(slog.DiscardHandler)
}

// TestShards_EveryMessageOnceInOrder: two workers of a world of 8 shards
// deliver 500 ids' mail, each id's in posting order, each message once
// (no fault, no takeover: a graceful handover hands nothing out twice),
// and remove it: the mailboxes end empty.
func TestShards_EveryMessageOnceInOrder(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{Shards: 8})
	ctx := testutil.Ctx(t, time.Minute)
	l := newLedger()
	pool(t, w, 2, 2*time.Second, l.handle)
	const ids, per = 500, 4
	want := map[string][]uint64{}
	for r := range per {
		for i := range ids {
			id := fmt.Sprint("id-", i)
			p, err := w.Send(ctx, id, []byte(fmt.Sprint(r)))
			require.NoError(t, err)
			want[id] = append(want[id], p.Seq)
		}
	}
	testutil.WaitFor(t, 30*time.Second, "every message delivered", func() bool { return l.count() >= ids*per })
	l.onceInOrder(t, want)
	testutil.WaitFor(t, 10*time.Second, "the mailboxes empty", func() bool {
		info, err := w.World.Inspect(ctx, world.InspectOptions{})
		require.NoError(t, err)
		return info.Mailbox.Msgs == 0
	})
}

// TestShards_FailingIDDoesNotHoldBackItsShard: in a world of one shard, an
// id whose handler always fails gets exactly max_deliveries calls, counted
// 1 to 5, then one dead letter, and its next message is delivered once;
// meanwhile every other id of the shard is delivered, all before the
// failing id's last call (its backoffs add up to 1.5 s). Head-of-line
// blocking, the classic fault of ownership by partition, would hold the
// other ids behind it.
func TestShards_FailingIDDoesNotHoldBackItsShard(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{Shards: 1, MaxDeliveries: 5})
	ctx := testutil.Ctx(t, time.Minute)
	var mu sync.Mutex
	var badCalls []int
	var lastOther, lastBad time.Time
	others := 0
	pool(t, w, 1, 2*time.Second, func(_ context.Context, m drain.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if m.ID == "bad" && string(m.Body) == "poison" {
			badCalls = append(badCalls, m.Delivery)
			lastBad = time.Now()
			return fmt.Errorf("poison")
		}
		if m.ID != "bad" {
			others++
			lastOther = time.Now()
		}
		return nil
	})
	_, err := w.Send(ctx, "bad", []byte("poison"))
	require.NoError(t, err)
	_, err = w.Send(ctx, "bad", []byte("after"))
	require.NoError(t, err)
	const n = 300
	for i := range n {
		_, err := w.Send(ctx, fmt.Sprint("ok-", i%50), []byte("x"))
		require.NoError(t, err)
	}
	testutil.WaitFor(t, 30*time.Second, "the dead letter", func() bool {
		dl, err := w.Mailboxes.DeadLetters(ctx, "bad", 10)
		require.NoError(t, err)
		return len(dl) == 1
	})
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []int{1, 2, 3, 4, 5}, badCalls, "max_deliveries calls, counted")
	require.Equal(t, n, others, "every other message, once")
	require.True(t, lastOther.Before(lastBad), "the other ids were delivered while the failing one waited (last other %v, last failing call %v)", lastOther, lastBad)
}

// TestShards_CrashTakeover: a worker that crashes mid-way (nothing of
// what it handled after its last commit is committed; its node lease is
// left to lapse) is replaced by another node within about a ttl, which
// delivers every message the first did not commit: none is lost, each
// node hands an id's messages out in order, and the second flags what the
// first may have handed out (Redelivered).
func TestShards_CrashTakeover(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{Shards: 4})
	ctx := testutil.Ctx(t, time.Minute)
	const ttl = time.Second
	var mu sync.Mutex
	byNode := map[string]map[string][]uint64{}
	redelivered := 0
	delivered := map[uint64]bool{}
	handler := func(node string) drain.Handler {
		return func(_ context.Context, m drain.Message) error {
			mu.Lock()
			defer mu.Unlock()
			if byNode[node] == nil {
				byNode[node] = map[string][]uint64{}
			}
			byNode[node][m.ID] = append(byNode[node][m.ID], m.Seq)
			delivered[m.Seq] = true
			if m.Redelivered {
				redelivered++
			}
			return nil
		}
	}
	a, err := w.NewWorker(worker.Config{Node: "a", TTL: ttl, Log: testLog()}, handler("a"))
	require.NoError(t, err)
	aDone := make(chan error, 1)
	go func() { aDone <- a.Run(ctx) }()
	testutil.WaitFor(t, 10*time.Second, "a holds every shard", func() bool { return len(a.Held()) == 4 })

	var posted []uint64
	for i := range 400 {
		p, err := w.Send(ctx, fmt.Sprint("id-", i%40), []byte("x"))
		require.NoError(t, err)
		posted = append(posted, p.Seq)
		if i == 200 {
			a.Shards().Crash()
			require.NoError(t, <-aDone)
		}
	}
	crashed := time.Now()
	b, err := w.NewWorker(worker.Config{Node: "b", TTL: ttl, Log: testLog()}, handler("b"))
	require.NoError(t, err)
	bctx, bstop := context.WithCancel(ctx)
	bDone := make(chan error, 1)
	go func() { bDone <- b.Run(bctx) }()
	defer func() { bstop(); require.NoError(t, <-bDone) }()
	testutil.WaitFor(t, 10*time.Second, "b holds every shard", func() bool { return len(b.Held()) == 4 })
	took := time.Since(crashed)
	testutil.WaitFor(t, 20*time.Second, "every message delivered", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, s := range posted {
			if !delivered[s] {
				return false
			}
		}
		return true
	})
	t.Logf("takeover %v after the crash (ttl %v); %d redelivered", took, ttl, redelivered)
	require.Less(t, took, 3*ttl, "the shards were taken over about a ttl after the crash")
	mu.Lock()
	defer mu.Unlock()
	for node, ids := range byNode {
		for id, seqs := range ids {
			for i := 1; i < len(seqs); i++ {
				require.Less(t, seqs[i-1], seqs[i], "node %s, id %s: in order", node, id)
			}
		}
	}
}

// TestShards_UnroutableMovedAside: a post to a mailbox subject whose token
// is no id's is stored under a shard all the same; the shard's holder
// moves it to the world's unroutable dead letters and the shard's ids go
// on (before, it stopped the shard for good).
func TestShards_UnroutableMovedAside(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{Shards: 1})
	ctx := testutil.Ctx(t, 30*time.Second)
	l := newLedger()
	pool(t, w, 1, 2*time.Second, l.handle)
	testutil.Publish(t, ctx, w, "fp."+w.Name+".mb.not=an=id", "stray")
	_, err := w.Send(ctx, "after", []byte("x"))
	require.NoError(t, err)
	testutil.WaitFor(t, 10*time.Second, "the id after it delivered", func() bool { return l.count() == 1 })
	testutil.WaitFor(t, 10*time.Second, "the stray post moved aside", func() bool {
		dl, err := w.Mailboxes.Unroutable(ctx, 10)
		require.NoError(t, err)
		return len(dl) == 1 && string(dl[0].Body) == "stray"
	})
	testutil.WaitFor(t, 10*time.Second, "the mailboxes empty", func() bool {
		info, err := w.World.Inspect(ctx, world.InspectOptions{})
		require.NoError(t, err)
		return info.Mailbox.Msgs == 1 // the unroutable dead letter
	})
}

// TestShards_EndedHoldingLeavesNoConsumer: a holding that ends deletes its
// reader's consumer at once. A stopped reader's consumer kept its last
// pull request open, and the server went on passing over the stream for
// it and sending mail nobody read until it expired: with holdings ending
// at every takeover, that was most of the cost of a sharded zipf run.
func TestShards_EndedHoldingLeavesNoConsumer(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{Shards: 4})
	ctx := testutil.Ctx(t, time.Minute)
	stop := pool(t, w, 1, 2*time.Second, func(context.Context, drain.Message) error { return nil })
	consumers := func() int {
		info, err := handles.Of(w.World).Mailbox.Info(ctx)
		require.NoError(t, err)
		return info.State.Consumers
	}
	testutil.WaitFor(t, 20*time.Second, "a reader for each of the 4 shards", func() bool { return consumers() == 4 })
	stop(0)
	// Well inside the readers' inactive threshold (10 s) and their pull
	// requests' expiry (5 s).
	testutil.WaitFor(t, 3*time.Second, "no consumer left once the holdings ended", func() bool { return consumers() == 0 })
}

// TestShards_ReaderReadsAgainAfterItsConsumerIsGone: the readers'
// consumers are deleted under them (as a stream leader's death takes its
// consumers), between two rounds of posts; each reader makes its consumer
// again from its last message, and every message is delivered once, in
// order, with no holding lost.
func TestShards_ReaderReadsAgainAfterItsConsumerIsGone(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{Shards: 4})
	ctx := testutil.Ctx(t, time.Minute)
	l := newLedger()
	pool(t, w, 1, 5*time.Second, l.handle)
	mb := handles.Of(w.World).Mailbox
	names := func() []string {
		var out []string
		for n := range mb.ConsumerNames(ctx).Name() {
			out = append(out, n)
		}
		return out
	}
	testutil.WaitFor(t, 20*time.Second, "a reader for each of the 4 shards", func() bool { return len(names()) == 4 })
	const ids = 40
	want := map[string][]uint64{}
	post := func(round int) {
		for i := range ids {
			id := fmt.Sprint("id-", i)
			p, err := w.Send(ctx, id, []byte(fmt.Sprint(round)))
			require.NoError(t, err)
			want[id] = append(want[id], p.Seq)
		}
	}
	post(0)
	testutil.WaitFor(t, 20*time.Second, "the first round delivered", func() bool { return l.count() >= ids })
	before := names()
	for _, n := range before {
		require.NoError(t, mb.DeleteConsumer(ctx, n))
	}
	post(1)
	testutil.WaitFor(t, 30*time.Second, "the second round delivered", func() bool { return l.count() >= 2*ids })
	after := names()
	require.Len(t, after, 4, "one reader per shard again")
	for _, n := range after {
		require.NotContains(t, before, n, "a reader kept a consumer that was deleted")
	}
	l.onceInOrder(t, want)
}

// TestShards_FailureInsideAnIDsRun: an id's messages queued together go
// to its handler one after the other; the fifth fails once. The four
// before it are done once, the fifth is delivered again (delivery 2)
// before any message after it, and the rest follow once each, in order.
func TestShards_FailureInsideAnIDsRun(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{Shards: 1})
	ctx := testutil.Ctx(t, time.Minute)
	const n = 40
	for i := range n {
		_, err := w.Send(ctx, "one", []byte(fmt.Sprint(i)))
		require.NoError(t, err)
	}
	var mu sync.Mutex
	var got []string
	failed := false
	pool(t, w, 1, 5*time.Second, func(_ context.Context, m drain.Message) error {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, fmt.Sprintf("%s/%d", m.Body, m.Delivery))
		if string(m.Body) == "4" && !failed {
			failed = true
			return errors.New("once")
		}
		return nil
	})
	testutil.WaitFor(t, 30*time.Second, "every message handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) >= n+1
	})
	want := []string{"0/1", "1/1", "2/1", "3/1", "4/1", "4/2"}
	for i := 5; i < n; i++ {
		want = append(want, fmt.Sprintf("%d/1", i))
	}
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, want, got)
}

// TestShards_CommitRefusedOverItsOwnRecordGoesOn: the shard's record
// rewritten as it was (a new revision; the same node, epoch and node
// lease) makes the broker refuse the holder's next commit, as a
// replicated stream's leader refuses one while another write to the record
// is in process. The record still names the holding, so it commits at the
// record's revision and goes on: each message delivered once, under the
// same epoch, and committed. Before, every refusal ended the holding, and
// the shard stayed held by its live node and served by nobody (seen on
// `bench --cluster 3 --shards 8`, which waited out two minutes for a
// shard's holder).
func TestShards_CommitRefusedOverItsOwnRecordGoesOn(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{Shards: 1})
	ctx := testutil.Ctx(t, time.Minute)
	l := newLedger()
	pool(t, w, 1, 2*time.Second, l.handle)
	p1, err := w.Send(ctx, "a", []byte("1"))
	require.NoError(t, err)
	committed := func() bool {
		st, err := w.Mailboxes.Stat(ctx, "a")
		require.NoError(t, err)
		return st.Depth == 0
	}
	testutil.WaitFor(t, 10*time.Second, "the first message committed", committed)
	epoch := l.of("a")[0].Fence.Epoch

	kv := handles.Of(w.World).KV
	key := wire.RecordKey(wire.ShardUnit(0))
	rec, err := kv.Get(ctx, key)
	require.NoError(t, err)
	_, err = kv.Put(ctx, key, rec.Value())
	require.NoError(t, err)

	p2, err := w.Send(ctx, "a", []byte("2"))
	require.NoError(t, err)
	testutil.WaitFor(t, 10*time.Second, "the second message committed", committed)
	p3, err := w.Send(ctx, "a", []byte("3"))
	require.NoError(t, err)
	testutil.WaitFor(t, 10*time.Second, "the third message committed", committed)
	l.onceInOrder(t, map[string][]uint64{"a": {p1.Seq, p2.Seq, p3.Seq}})
	for _, m := range l.of("a") {
		require.Equal(t, epoch, m.Fence.Epoch, "message %d: the same holding", m.Seq)
	}
}

// of is the calls for id so far.
func (l *ledger) of(id string) []drain.Message {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.calls[id])
}
