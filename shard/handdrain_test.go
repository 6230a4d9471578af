package shard_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/shard"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/worker"
	"github.com/fencepost/fencepost/world"
)

// handDrainWorld is a world of 4 shards with per messages posted to each
// of 40 ids, and the messages of shard q (that of "id-0"), by id.
func handDrainWorld(t *testing.T, cfg world.Config, per int) (w *client.World, q int, want map[string][]uint64, n int) {
	t.Helper()
	env := testutil.Start(t, testutil.Targets()[0])
	cfg.Shards = 4
	w = env.World(t, cfg)
	ctx := testutil.Ctx(t, time.Minute)
	q = wire.ShardOf("id-0", 4)
	want = map[string][]uint64{}
	for r := range per {
		for i := range 40 {
			id := fmt.Sprint("id-", i)
			p, err := w.Send(ctx, id, []byte(fmt.Sprint(r)))
			require.NoError(t, err)
			if wire.ShardOf(id, 4) == q {
				want[id] = append(want[id], p.Seq)
				n++
			}
		}
	}
	require.Greater(t, len(want), 1, "the shard has several ids")
	return w, q, want, n
}

// bucketLastSeq is the last sequence of w's bucket stream: every write
// of a record, cursor or lock moves it.
func bucketLastSeq(t *testing.T, w *client.World) uint64 {
	t.Helper()
	ctx := testutil.Ctx(t, 5*time.Second)
	st, err := handles.Of(w.World).JS.Stream(ctx, wire.BucketStream(w.Name))
	require.NoError(t, err)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	return info.State.LastSeq
}

// TestDrain_ShardByHand: the holder of a shard (won by a claim of the
// shard's unit) drains it by hand: every message of the shard, each id's
// in posting order, each once, nothing of another shard; done(count)
// counts them, and a second drain finds nothing left.
func TestDrain_ShardByHand(t *testing.T) {
	w, q, want, n := handDrainWorld(t, world.Config{}, 3)
	ctx := testutil.Ctx(t, time.Minute)
	unit := wire.ShardUnit(q)
	l, err := w.Ownership.Claim(ctx, unit, "n1", 30*time.Second)
	require.NoError(t, err)
	led := newLedger()
	res, err := shard.Drain(ctx, w.World, w.Ownership, w.Drainer, q, "n1", l.Epoch, led.handle, shard.DrainOptions{Log: testLog()})
	require.NoError(t, err)
	require.Equal(t, n, res.Count, "done(count): every message of the shard")
	require.Equal(t, n, res.Acked)
	require.Equal(t, n, res.Deliveries)
	require.Zero(t, res.DeadLettered)
	require.Equal(t, n, led.count(), "nothing of another shard")
	led.onceInOrder(t, want)
	for id := range want {
		require.Equal(t, q, wire.ShardOf(id, 4))
	}

	again := newLedger()
	res, err = shard.Drain(ctx, w.World, w.Ownership, w.Drainer, q, "n1", l.Epoch, again.handle, shard.DrainOptions{Log: testLog()})
	require.NoError(t, err)
	require.Zero(t, res.Count, "the commit covers what the first drain handled")
	require.Zero(t, again.count())
	for id := range want {
		st, err := w.Mailboxes.Stat(ctx, id)
		require.NoError(t, err)
		require.Zero(t, st.Depth, "id %s: nothing left", id)
	}
}

// TestDrain_ShardByHandRefusals: a caller that is not the shard's holder
// at that epoch gets the record's answer, a shard a worker holds is
// contended, and none of them writes anything or delivers anything.
func TestDrain_ShardByHandRefusals(t *testing.T) {
	w, q, _, _ := handDrainWorld(t, world.Config{}, 1)
	ctx := testutil.Ctx(t, time.Minute)
	unit := wire.ShardUnit(q)
	led := newLedger()
	drainAs := func(node string, epoch uint64) error {
		_, err := shard.Drain(ctx, w.World, w.Ownership, w.Drainer, q, node, epoch, led.handle, shard.DrainOptions{Log: testLog()})
		return err
	}
	before := bucketLastSeq(t, w)
	var free *ownership.FreeError
	require.ErrorAs(t, drainAs("n1", 1), &free, "never claimed")

	l, err := w.Ownership.Claim(ctx, unit, "n1", 30*time.Second)
	require.NoError(t, err)
	before = bucketLastSeq(t, w)
	var held *ownership.HeldError
	require.ErrorAs(t, drainAs("n2", l.Epoch), &held)
	require.Equal(t, "n1", held.Node)
	var fenced *ownership.FencedError
	require.ErrorAs(t, drainAs("n1", l.Epoch+1), &fenced)
	require.Equal(t, l.Epoch, fenced.Current)
	_, err = shard.Drain(ctx, w.World, w.Ownership, w.Drainer, 4, "n1", l.Epoch, led.handle, shard.DrainOptions{Log: testLog()})
	require.Error(t, err, "shard 4 of 4")
	require.Equal(t, before, bucketLastSeq(t, w), "refusals write nothing")
	require.Zero(t, led.count(), "refusals deliver nothing")

	// A worker's shard: held through its node lease.
	require.NoError(t, w.Ownership.Release(ctx, unit, "n1"))
	pctx, stop := context.WithCancel(ctx)
	defer stop()
	wk, err := w.NewWorker(worker.Config{Node: "wk", TTL: 2 * time.Second, Log: testLog()}, func(context.Context, drain.Message) error { return nil })
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- wk.Run(pctx) }()
	var st ownership.Status
	testutil.WaitFor(t, 10*time.Second, "the worker holds the shard", func() bool {
		st, err = w.Ownership.Owner(ctx, unit)
		require.NoError(t, err)
		return st.Held && st.Node == "wk"
	})
	var contended *drain.ContendedError
	require.ErrorAs(t, drainAs("wk", st.Epoch), &contended)
	require.True(t, contended.Session, "a worker delivers it")
	stop()
	require.NoError(t, <-done)
}

// TestDrain_ShardByHandContended: a second drain of a shard while one
// runs is refused (contended) and delivers nothing; once the first ended,
// a drain goes through.
func TestDrain_ShardByHandContended(t *testing.T) {
	w, q, _, n := handDrainWorld(t, world.Config{}, 1)
	ctx := testutil.Ctx(t, time.Minute)
	l, err := w.Ownership.Claim(ctx, wire.ShardUnit(q), "n1", 30*time.Second)
	require.NoError(t, err)
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	first := make(chan error, 1)
	go func() {
		_, err := shard.Drain(ctx, w.World, w.Ownership, w.Drainer, q, "n1", l.Epoch, func(context.Context, drain.Message) error {
			once.Do(func() { close(entered) })
			<-release
			return nil
		}, shard.DrainOptions{Log: testLog()})
		first <- err
	}()
	<-entered
	led := newLedger()
	_, err = shard.Drain(ctx, w.World, w.Ownership, w.Drainer, q, "n1", l.Epoch, led.handle, shard.DrainOptions{Log: testLog()})
	var contended *drain.ContendedError
	require.ErrorAs(t, err, &contended)
	require.Zero(t, led.count())
	close(release)
	require.NoError(t, <-first)
	res, err := shard.Drain(ctx, w.World, w.Ownership, w.Drainer, q, "n1", l.Epoch, led.handle, shard.DrainOptions{Log: testLog()})
	require.NoError(t, err)
	require.Zero(t, res.Count, "the first drain committed all %d", n)
}

// TestDrain_ShardByHandMax: max bounds the messages acknowledged; the
// next drain delivers the rest, in order, nothing twice.
func TestDrain_ShardByHandMax(t *testing.T) {
	w, q, want, n := handDrainWorld(t, world.Config{}, 3)
	require.Greater(t, n, 5)
	ctx := testutil.Ctx(t, time.Minute)
	l, err := w.Ownership.Claim(ctx, wire.ShardUnit(q), "n1", 30*time.Second)
	require.NoError(t, err)
	led := newLedger()
	res, err := shard.Drain(ctx, w.World, w.Ownership, w.Drainer, q, "n1", l.Epoch, led.handle, shard.DrainOptions{Max: 5, Log: testLog()})
	require.NoError(t, err)
	require.Equal(t, 5, res.Count)
	require.Equal(t, 5, led.count())
	res, err = shard.Drain(ctx, w.World, w.Ownership, w.Drainer, q, "n1", l.Epoch, led.handle, shard.DrainOptions{Log: testLog()})
	require.NoError(t, err)
	require.Equal(t, n-5, res.Count)
	led.onceInOrder(t, want)
}

// TestDrain_ShardByHandMaxWhileMailArrives: a drain by hand with max
// hands out no more than max messages while mail keeps arriving (CI, 7
// Dec: a drain with max 5 handed out and committed all 57). A call's slot
// is free before the holder's loop has settled its result; a message read
// in between made the loop hand out another before the acknowledgement
// was counted, the count passed max, and the bound was gone. Each call
// here posts a message of the shard, so that the loop has one to read
// while the call's result waits.
func TestDrain_ShardByHandMaxWhileMailArrives(t *testing.T) {
	w, q, want, _ := handDrainWorld(t, world.Config{}, 1)
	ids := slices.Sorted(maps.Keys(want))
	ctx := testutil.Ctx(t, time.Minute)
	l, err := w.Ownership.Claim(ctx, wire.ShardUnit(q), "n1", 30*time.Second)
	require.NoError(t, err)
	for round := range 10 {
		var calls atomic.Int64
		h := func(ctx context.Context, m drain.Message) error {
			n := calls.Add(1)
			_, err := w.Send(ctx, ids[int(n)%len(ids)], []byte("more"))
			return err
		}
		res, err := shard.Drain(ctx, w.World, w.Ownership, w.Drainer, q, "n1", l.Epoch, h, shard.DrainOptions{Max: 3, Log: testLog()})
		require.NoError(t, err)
		require.Equal(t, 3, res.Acked, "round %d", round)
		require.EqualValues(t, 3, calls.Load(), "round %d: messages handed out", round)
	}
}

// TestDrain_ShardByHandFailingID: an id whose handler always fails gets
// exactly max_deliveries calls, then a dead letter, within one drain; the
// shard's other ids are delivered once each.
func TestDrain_ShardByHandFailingID(t *testing.T) {
	w, q, want, n := handDrainWorld(t, world.Config{MaxDeliveries: 3}, 2)
	ctx := testutil.Ctx(t, time.Minute)
	l, err := w.Ownership.Claim(ctx, wire.ShardUnit(q), "n1", 30*time.Second)
	require.NoError(t, err)
	led := newLedger()
	var bad []int
	res, err := shard.Drain(ctx, w.World, w.Ownership, w.Drainer, q, "n1", l.Epoch, func(ctx context.Context, m drain.Message) error {
		if m.ID == "id-0" && m.Seq == want["id-0"][0] {
			bad = append(bad, m.Delivery)
			return errors.New("poison")
		}
		return led.handle(ctx, m)
	}, shard.DrainOptions{Log: testLog()})
	require.NoError(t, err)
	require.Equal(t, []int{1, 2, 3}, bad, "max_deliveries calls, counted")
	require.Equal(t, 1, res.DeadLettered)
	require.Equal(t, n, res.Count)
	require.Equal(t, n-1, res.Acked)
	dl, err := w.Mailboxes.DeadLetters(ctx, "id-0", 10)
	require.NoError(t, err)
	require.Len(t, dl, 1)
	want["id-0"] = want["id-0"][1:]
	led.onceInOrder(t, want)
}

// TestDrain_ShardByHandLease: a drain acts within the lease it read. When
// that runs out with mail left, it commits what was handled and reads the
// record again: a holder that renewed meanwhile goes on to the end; one
// that did not gets free, and what it committed is not delivered again.
func TestDrain_ShardByHandLease(t *testing.T) {
	const ttl = time.Second
	t.Run("renewed", func(t *testing.T) {
		w, q, want, n := handDrainWorld(t, world.Config{}, 3)
		ctx := testutil.Ctx(t, time.Minute)
		unit := wire.ShardUnit(q)
		l, err := w.Ownership.Claim(ctx, unit, "n1", ttl)
		require.NoError(t, err)
		led := newLedger()
		start := time.Now()
		var renewed bool
		res, err := shard.Drain(ctx, w.World, w.Ownership, w.Drainer, q, "n1", l.Epoch, func(ctx context.Context, m drain.Message) error {
			if !renewed && time.Since(start) > ttl/2 {
				_, err := w.Ownership.Renew(ctx, unit, "n1", time.Minute)
				require.NoError(t, err)
				renewed = true
			}
			time.Sleep(3 * ttl / time.Duration(n)) // the drain outlasts the first lease
			return led.handle(ctx, m)
		}, shard.DrainOptions{Log: testLog()})
		require.NoError(t, err)
		require.True(t, renewed)
		require.Greater(t, time.Since(start), ttl, "the drain outlasted the lease it began with")
		require.Equal(t, n, res.Count)
		led.onceInOrder(t, want)
	})
	t.Run("lapsed", func(t *testing.T) {
		w, q, want, n := handDrainWorld(t, world.Config{}, 3)
		ctx := testutil.Ctx(t, time.Minute)
		unit := wire.ShardUnit(q)
		l, err := w.Ownership.Claim(ctx, unit, "n1", ttl)
		require.NoError(t, err)
		led := newLedger()
		slow := func(ctx context.Context, m drain.Message) error {
			time.Sleep(3 * ttl / time.Duration(n))
			return led.handle(ctx, m)
		}
		res, err := shard.Drain(ctx, w.World, w.Ownership, w.Drainer, q, "n1", l.Epoch, slow, shard.DrainOptions{Log: testLog()})
		var free *ownership.FreeError
		require.ErrorAs(t, err, &free, "the lease lapsed")
		require.Greater(t, res.Count, 0, "what was handled in the lease is committed")
		require.Less(t, res.Count, n)
		l, err = w.Ownership.Claim(ctx, unit, "n1", 30*time.Second)
		require.NoError(t, err)
		rest, err := shard.Drain(ctx, w.World, w.Ownership, w.Drainer, q, "n1", l.Epoch, led.handle, shard.DrainOptions{Log: testLog()})
		require.NoError(t, err)
		require.Equal(t, n, res.Count+rest.Count)
		led.onceInOrder(t, want)
	})
}
