package shard_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/worker"
	"github.com/fencepost/fencepost/world"
)

// TestShards_StateExactlyOnce: per-id state on a sharded world, through
// crashes. Workers that count each id's messages in its state (testutil.
// Counter) are crashed one after another while mail arrives (what they
// handled after their last commit, state writes included, is lost); the
// next takes over. At the end every id's count is exactly the number of
// messages posted to it and its "seen" holds each body once, in posting
// order, although some messages were handled more than once.
func TestShards_StateExactlyOnce(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{Shards: 4})
	ctx := testutil.Ctx(t, 2*time.Minute)
	counter := &testutil.Counter{}
	const ids, per = 20, 30
	start := func(node string) (*worker.Worker, chan error) {
		wk, err := w.NewStateWorker(worker.Config{Node: node, TTL: 500 * time.Millisecond, Log: testLog()}, counter.Handle)
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() { done <- wk.Run(ctx) }()
		return wk, done
	}
	wk, done := start("n0")
	for r := range per {
		for i := range ids {
			_, err := w.Send(ctx, fmt.Sprint("id-", i), []byte(fmt.Sprintf("%02d,", r)))
			require.NoError(t, err)
		}
		if r%10 == 9 {
			wk.Shards().Crash()
			require.NoError(t, <-done)
			wk, done = start(fmt.Sprint("n", r))
		}
	}
	defer func() { wk.Shards().Crash(); <-done }()
	want := ""
	for r := range per {
		want += fmt.Sprintf("%02d,", r)
	}
	testutil.WaitFor(t, time.Minute, "every id's state complete", func() bool {
		for i := range ids {
			if testutil.StoredState(t, w, fmt.Sprint("id-", i))["seen"] != want {
				return false
			}
		}
		return true
	})
	for i := range ids {
		st := testutil.StoredState(t, w, fmt.Sprint("id-", i))
		require.Equal(t, strconv.Itoa(per), st["count"], "id-%d: each message counted once", i)
		require.Equal(t, want, st["seen"], "id-%d", i)
	}
	t.Logf("%d handler calls for %d messages", len(counter.Bodies()), ids*per)
}

// TestShards_StateReadAndDelete: on a sharded world `fencepost state ID`
// reads the id's state as committed with its shard's cursor, and `state
// ID --delete` is refused while a worker holds the id's shard, and
// deletes every key (fenced by a claim of the shard) once it is free.
func TestShards_StateReadAndDelete(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{Shards: 2})
	ctx := testutil.Ctx(t, time.Minute)
	counter := &testutil.Counter{}
	wk, err := w.NewStateWorker(worker.Config{Node: "n1", TTL: 2 * time.Second, Log: testLog()}, counter.Handle)
	require.NoError(t, err)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- wk.Run(rctx) }()
	var last uint64
	for i := range 3 {
		p, err := w.Send(ctx, "a", []byte(fmt.Sprint(i)))
		require.NoError(t, err)
		last = p.Seq
	}
	testutil.WaitFor(t, 10*time.Second, "three counted", func() bool {
		st, err := w.Mailboxes.ReadState(ctx, "a")
		require.NoError(t, err)
		return string(st.Values["count"]) == "3"
	})
	st, err := w.Mailboxes.ReadState(ctx, "a")
	require.NoError(t, err)
	require.GreaterOrEqual(t, st.Cursor, last, "the state is that of every message up to its cursor")
	_, err = w.Mailboxes.DeleteState(ctx, "a", "op")
	require.ErrorIs(t, err, ownership.ErrHeld, "refused while a worker holds the shard")
	stop()
	require.NoError(t, <-done)
	keys, err := w.Mailboxes.DeleteState(ctx, "a", "op")
	require.NoError(t, err)
	require.Equal(t, []string{"count", "seen"}, keys)
	st, err = w.Mailboxes.ReadState(ctx, "a")
	require.NoError(t, err)
	require.Empty(t, st.Values)
}

// TestShards_StateBatchFailsMidway: an id's queued messages go to its
// handler in one call, each with the state its predecessors' writes left.
// A message that fails in the middle of such a call (after staging
// writes) keeps none of its writes; the messages before it keep theirs,
// and a commit stores them with a cursor that covers them while the
// failing one is retried; none after it is handled before its retry
// succeeds: every message counted once, in posting order.
func TestShards_StateBatchFailsMidway(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{Shards: 2, MaxDeliveries: 100})
	ctx := testutil.Ctx(t, time.Minute)
	const n = 20
	want := ""
	for i := range n {
		body := fmt.Sprintf("%02d,", i)
		want += body
		_, err := w.Send(ctx, "a", []byte(body))
		require.NoError(t, err)
	}
	// 07 fails until released, 13 once; each after staging its writes.
	var mu sync.Mutex
	var calls []string
	release, failed13 := make(chan struct{}), false
	counter := &testutil.Counter{}
	handle := func(ctx context.Context, m drain.Message, st *drain.State) error {
		if err := counter.Handle(ctx, m, st); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, string(m.Body))
		switch string(m.Body) {
		case "07,":
			select {
			case <-release:
			default:
				return errors.New("failed after staging its writes")
			}
		case "13,":
			if !failed13 {
				failed13 = true
				return errors.New("failed after staging its writes")
			}
		}
		return nil
	}
	wk, err := w.NewStateWorker(worker.Config{Node: "n1", TTL: 2 * time.Second, Log: testLog()}, handle)
	require.NoError(t, err)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- wk.Run(rctx) }()
	testutil.WaitFor(t, 20*time.Second, "00-06 committed while 07 fails", func() bool {
		st := testutil.StoredState(t, w, "a")
		return st["count"] == "7" && st["seen"] == want[:7*3]
	})
	close(release)
	testutil.WaitFor(t, 20*time.Second, "every message counted", func() bool {
		return testutil.StoredState(t, w, "a")["count"] == strconv.Itoa(n)
	})
	stop()
	require.NoError(t, <-done)
	st := testutil.StoredState(t, w, "a")
	require.Equal(t, strconv.Itoa(n), st["count"], "each message counted once")
	require.Equal(t, want, st["seen"], "in posting order, no failed call's writes")
	mu.Lock()
	defer mu.Unlock()
	require.Greater(t, strings.Count(strings.Join(calls, ""), "07,"), 1, "07 failed")
	require.Equal(t, 2, strings.Count(strings.Join(calls, ""), "13,"), "13 failed once")
	var order []string
	for _, c := range calls {
		if len(order) == 0 || order[len(order)-1] != c {
			order = append(order, c)
		}
	}
	require.Equal(t, strings.SplitAfter(want, ",")[:n], order, "no message handled before its predecessor's retry succeeded")
}

// TestShards_StateCommitsShareBatches: the state commits of a worker's
// shards go out in shared atomic batches (jsapi.BatchQueue): some batch
// carries the cursors of two shards or more, and every id's state is
// still exact. Each commit in a batch of its own would cost the server a
// synced store per shard commit on one file-backed replica.
func TestShards_StateCommitsShareBatches(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	const shards, ids, per = 8, 64, 20
	w := env.World(t, world.Config{Shards: shards})
	nc, err := nats.Connect(env.URL)
	require.NoError(t, err)
	defer nc.Close()
	sub, err := nc.SubscribeSync(wire.KeySubject(w.Name, ">"))
	require.NoError(t, err)
	require.NoError(t, nc.Flush())

	c := startCounting(t, w, testLog())
	for r := range per {
		c.post(t, ids, r)
	}
	c.waitCounted(t, ids, per)
	c.stop()
	require.NoError(t, nc.Flush()) // every write the server sent the tap is in its channel (testutil.Tap)

	cursors := map[string]bool{}
	for q := range shards {
		cursors[wire.KeySubject(w.Name, wire.CursorKey(wire.ShardUnit(q)))] = true
	}
	batches := map[string]map[string]bool{} // batch id: the shard cursors it carried
	commits := 0
	for {
		m, err := sub.NextMsg(0)
		if errors.Is(err, nats.ErrTimeout) {
			break
		}
		require.NoError(t, err)
		id := m.Header.Get(jsapi.HeaderBatchID)
		if id == "" || !cursors[m.Subject] {
			continue
		}
		commits++
		if batches[id] == nil {
			batches[id] = map[string]bool{}
		}
		batches[id][m.Subject] = true
	}
	widest := 0
	for _, cs := range batches {
		widest = max(widest, len(cs))
	}
	t.Logf("%d state commits in %d batches; the widest carried %d shards' cursors", commits, len(batches), widest)
	require.Greater(t, widest, 1, "no batch carried the commits of two shards")
	for i := range ids {
		require.Equal(t, strconv.Itoa(per), testutil.StoredState(t, w, fmt.Sprint("id-", i))["count"], "id-%d: each message counted once", i)
	}
}

// TestShards_SharedBatchRefusedForOneShard: a shared batch of state
// commits is refused whole when one part's fence is stale. Shard 0's
// record is written again as it was (a new revision, the same holding),
// ten times, so its next commit is refused, and the other shards' parts
// of the same batch with it (the holders tick together, so shard 0's
// commit shares a batch unless it is the first of its tick). Each holding reads its record, finds it still its own
// and commits again (holder.refence; the others' records did not move:
// moved=false), so the worker keeps all four shards and every id's count
// ends exact.
func TestShards_SharedBatchRefusedForOneShard(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	const shards, ids, per = 4, 32, 30
	w := env.World(t, world.Config{Shards: shards})
	events := &eventLog{}
	c := startCounting(t, w, slog.New(events))
	defer c.stop()
	testutil.WaitFor(t, 20*time.Second, "the worker holds every shard", func() bool {
		return len(c.wk.Shards().Held()) == shards
	})
	kv := handles.Of(w.World).KV
	key := wire.RecordKey(wire.ShardUnit(0))
	rewrites := 0
	for r := range per {
		rewrite := r%3 == 2
		if rewrite {
			rec, err := kv.Get(c.ctx, key)
			require.NoError(t, err)
			_, err = kv.Put(c.ctx, key, rec.Value())
			require.NoError(t, err)
			rewrites++
		}
		c.post(t, ids, r)
		if rewrite {
			// Once shard 0's holding took the rewrite in, so that each
			// rewrite meets a commit of its own.
			testutil.WaitFor(t, 10*time.Second, "shard 0's commit refused", func() bool {
				moved, _ := events.refenced()
				return moved >= rewrites
			})
			c.waitCounted(t, ids, r+1) // and made again: a refusal in a row is not another

		}
	}
	c.waitCounted(t, ids, per)
	require.Equal(t, []int{0, 1, 2, 3}, c.wk.Shards().Held(), "no shard lost")
	for i := range ids {
		require.Equal(t, strconv.Itoa(per), testutil.StoredState(t, w, fmt.Sprint("id-", i))["count"], "id-%d: each message counted once", i)
	}
	moved, unmoved := events.refenced()
	t.Logf("refenced: %d over a moved record, %d refused with another shard's part", moved, unmoved)
	require.Positive(t, moved, "shard 0's commits were refused")
	require.Positive(t, unmoved, "no batch refused with another shard's part in it")
}

// counting is a state worker n1 of w that counts each id's messages
// (testutil.Counter), and posts to ids id-0, id-1, ...
type counting struct {
	w    *client.World
	wk   *worker.Worker
	ctx  context.Context
	stop func() // stops the worker and waits for it
}

func startCounting(t *testing.T, w *client.World, log *slog.Logger) *counting {
	ctx := testutil.Ctx(t, time.Minute)
	counter := &testutil.Counter{}
	wk, err := w.NewStateWorker(worker.Config{Node: "n1", TTL: 5 * time.Second, Log: log}, counter.Handle)
	require.NoError(t, err)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- wk.Run(rctx) }()
	var once sync.Once
	return &counting{w: w, wk: wk, ctx: ctx, stop: func() {
		once.Do(func() {
			cancel()
			require.NoError(t, <-done)
		})
	}}
}

// post posts round r's body to each of ids ids.
func (c *counting) post(t *testing.T, ids, r int) {
	for i := range ids {
		_, err := c.w.Send(c.ctx, fmt.Sprint("id-", i), []byte(fmt.Sprintf("%02d,", r)))
		require.NoError(t, err)
	}
}

// waitCounted waits until each of ids ids has counted per messages.
func (c *counting) waitCounted(t *testing.T, ids, per int) {
	testutil.WaitFor(t, 30*time.Second, "every message counted", func() bool {
		for i := range ids {
			if testutil.StoredState(t, c.w, fmt.Sprint("id-", i))["count"] != strconv.Itoa(per) {
				return false
			}
		}
		return true
	})
}

// eventLog is a slog.Handler that keeps the holders' refenced events.
type eventLog struct {
	mu             sync.Mutex
	moved, unmoved int
}

func (e *eventLog) Enabled(context.Context, slog.Level) bool { return true }
func (e *eventLog) WithAttrs([]slog.Attr) slog.Handler       { return e }
func (e *eventLog) WithGroup(string) slog.Handler            { return e }
func (e *eventLog) Handle(_ context.Context, r slog.Record) error {
	var event string
	var moved bool
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "event":
			event = a.Value.String()
		case "moved":
			moved = a.Value.Bool()
		}
		return true
	})
	if event == "refenced" {
		e.mu.Lock()
		defer e.mu.Unlock()
		if moved {
			e.moved++
		} else {
			e.unmoved++
		}
	}
	return nil
}

func (e *eventLog) refenced() (moved, unmoved int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.moved, e.unmoved
}
