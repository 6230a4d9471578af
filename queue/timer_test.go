package queue_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/queue"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// fireBound is how late a timer may enter its mailbox before a test
// fails: the common case is well under half a second (TestTimer_Lateness
// measured p99 about 0.25 s), the bound is for a loaded CI.
const fireBound = 10 * time.Second

// storedMsg is the last message of id's mailbox (its stored subject in a
// sharded world), nil when there is none.
func storedMsg(t *testing.T, w *client.World, id string) *jetstream.RawStreamMsg {
	t.Helper()
	m, err := lastStored(w, id)
	require.NoError(t, err)
	return m
}

// lastStored is storedMsg with the read's error.
func lastStored(w *client.World, id string) (*jetstream.RawStreamMsg, error) {
	subj := wire.MailboxSubject(w.Name, id)
	if w.Config.Shards > 0 {
		subj = wire.ShardMailboxSubject(w.Name, id, w.Config.Shards)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	m, err := jsapi.LeaderGet(ctx, handles.Of(w).JS.Conn(), wire.MailboxStream(w.Name), jsapi.GetRequest{LastFor: subj})
	if errors.Is(err, jsapi.ErrNotFound) {
		return nil, nil
	}
	return m, err
}

// waitFired polls id's mailbox until the timer due at at is stored there
// (its last message is a fired copy: it has the scheduler's header),
// checking on every poll before at that it is not, and returns the stored
// message and when it was seen.
func waitFired(t *testing.T, w *client.World, id string, at time.Time) (*jetstream.RawStreamMsg, time.Time) {
	t.Helper()
	deadline := at.Add(fireBound)
	for {
		before := time.Now()
		// A fired copy has the scheduler's header; an error (a leader being
		// elected) is read again.
		m, err := lastStored(w, id)
		if err == nil && m != nil && m.Header.Get(wire.HeaderScheduler) != "" {
			require.False(t, m.Time.Before(at), "stored at %v, before its time %v", m.Time, at)
			require.False(t, time.Now().Before(at), "seen in the mailbox before its time")
			return m, before
		}
		require.True(t, time.Now().Before(deadline), "not fired %v after its time (last read: %v)", fireBound, err)
		time.Sleep(5 * time.Millisecond)
	}
}

// TestTimer_Fires: a timer set for 2 s enters its mailbox not before 2 s
// and soon after (the figure is logged), and from then on is an ordinary
// message: delivered to the holder, which was serving the id all along
// (its scan for missed mail is an hour away: the timer reaches it as any
// post does), in order with the mail posted before and after it fired,
// with its sender and headers and no broker headers. Per-id, sharded and
// partitioned worlds (whose workers read the posts the broker
// republishes: a fired timer is republished as a post), one node and R3.
func TestTimer_Fires(t *testing.T) {
	for _, tg := range testutil.Targets() {
		t.Run(tg.Name, func(t *testing.T) {
			env := testutil.Start(t, tg)
			for name, cfg := range map[string]world.Config{"per-id": {}, "sharded": {Shards: 4}, "partitioned": {Partitions: 4}} {
				t.Run(name, func(t *testing.T) { testTimerFires(t, env, cfg) })
			}
		})
	}
}

func testTimerFires(t *testing.T, env *testutil.Env, cfg world.Config) {
	ctx := testutil.Ctx(t, time.Minute)
	w := env.World(t, cfg)
	require.True(t, w.AllowsTimers())
	var rec testutil.Recorder
	wk, err := w.NewWorker(client.WorkerConfig{Node: "n1", TTL: 2 * time.Second, Scan: time.Hour}, rec.Handle)
	require.NoError(t, err)
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = wk.Run(wctx) }()
	defer func() { cancel(); wg.Wait() }()

	_, err = w.Send(ctx, "a.b", []byte("before"))
	require.NoError(t, err)
	testutil.WaitFor(t, 30*time.Second, "the first delivery", func() bool { return len(rec.Msgs()) == 1 })
	start := time.Now()
	p, err := w.Send(ctx, "a.b", []byte("timer"), queue.WithAfter(2*time.Second), queue.WithFrom("me"), queue.WithHeader("X-A", "b"))
	require.NoError(t, err)
	require.False(t, p.At.Before(start.Add(2*time.Second)), "at %v", p.At)
	require.NotEmpty(t, p.Key)
	var seen time.Time
	testutil.WaitFor(t, 2*time.Second+fireBound, "the timer's delivery", func() bool {
		if len(rec.Msgs()) < 2 {
			return false
		}
		seen = time.Now()
		require.False(t, seen.Before(p.At), "delivered before its time")
		return true
	})
	tm := rec.Msgs()[1]
	require.False(t, tm.Posted.Before(p.At), "stored at %v, before its time %v", tm.Posted, p.At)
	t.Logf("delivered %v after it was set for 2 s (stored %v after its time, delivered %v after)", seen.Sub(start), tm.Posted.Sub(p.At), seen.Sub(p.At))
	_, err = w.Send(ctx, "a.b", []byte("after"))
	require.NoError(t, err)
	testutil.WaitFor(t, 30*time.Second, "three deliveries", func() bool { return len(rec.Msgs()) >= 3 })
	require.Equal(t, []string{"before", "timer", "after"}, rec.Bodies())
	require.Equal(t, "a.b", tm.ID)
	require.Equal(t, "me", tm.From)
	require.Equal(t, "b", tm.Headers.Get("X-A"))
	require.Len(t, tm.Headers, 1, "no broker or fencepost header reaches the handler: %v", tm.Headers)
}

// TestTimer_SurvivesRestart: a timer set before a server restart fires
// after it, not before its time, once: one due while the server is down
// fires when it is back, one due after the restart fires at its time.
func TestTimer_SurvivesRestart(t *testing.T) {
	env := testutil.Start(t, testutil.Target{Name: "single"})
	ctx := testutil.Ctx(t, time.Minute)
	w := env.World(t, world.Config{})
	down, err := w.Send(ctx, "down", []byte("d"), queue.WithAfter(time.Second))
	require.NoError(t, err)
	up, err := w.Send(ctx, "up", []byte("u"), queue.WithAfter(5*time.Second))
	require.NoError(t, err)

	env.Node.Server.Stop()
	for time.Now().Before(down.At.Add(200 * time.Millisecond)) {
		time.Sleep(10 * time.Millisecond) // the server is down: nothing to poll
	}
	env.Node.Restart(t)
	testutil.WaitWorld(t, env, w.Name)
	w, err = env.Client.World(ctx, w.Name)
	require.NoError(t, err)

	m, seen := waitFired(t, w, "down", down.At)
	require.Equal(t, "d", string(m.Data))
	t.Logf("due while the server was down: seen %v after its time", seen.Sub(down.At))
	m, seen = waitFired(t, w, "up", up.At)
	require.Equal(t, "u", string(m.Data))
	t.Logf("due after the restart: seen %v after its time", seen.Sub(up.At))
	testutil.WaitFor(t, 2*time.Second, "settled", func() bool { return time.Since(up.At) > time.Second })
	require.Equal(t, uint64(1), stored(t, w, "down"), "fired once")
	require.Equal(t, uint64(1), stored(t, w, "up"), "fired once")
}

// TestTimer_Refused: a time too far in the past, a delay that is not
// positive, a time too far ahead, a bad key, both a time and a delay, a
// key without a time: each is refused with ErrInvalidTimer and writes
// nothing; so is a timer too large once the broker's headers are
// counted; and a world made before timers refuses them (ErrNoTimers).
func TestTimer_Refused(t *testing.T) {
	env := testutil.Start(t, testutil.Target{Name: "single"})
	ctx := testutil.Ctx(t, time.Minute)
	w := env.World(t, world.Config{MaxBody: 100, MaxHeaders: 1500})
	now := time.Now()
	for name, opts := range map[string][]queue.SendOption{
		"past":          {queue.WithAt(now.Add(-5 * time.Second))},
		"zero delay":    {queue.WithAfter(0)},
		"negative":      {queue.WithAfter(-time.Second)},
		"too far":       {queue.WithAt(now.Add(queue.MaxAhead + time.Hour))},
		"zero time":     {queue.WithAt(time.Time{})},
		"both":          {queue.WithAt(now.Add(time.Minute)), queue.WithAfter(time.Minute)},
		"key, no time":  {queue.WithTimerKey("k")},
		"bad key":       {queue.WithAfter(time.Minute), queue.WithTimerKey("a.b")},
		"own key":       {queue.WithAfter(time.Minute), queue.WithTimerKey("_x")},
		"long key":      {queue.WithAfter(time.Minute), queue.WithTimerKey(string(make([]byte, 65)))},
		"empty key":     {queue.WithAfter(time.Minute), queue.WithTimerKey("")},
		"key with star": {queue.WithAfter(time.Minute), queue.WithTimerKey("*")},
	} {
		_, err := w.Send(ctx, "a", []byte("x"), opts...)
		require.ErrorIs(t, err, queue.ErrInvalidTimer, name)
	}
	// Headers that fit a post but not a timer: the broker adds its own.
	_, err := w.Send(ctx, "a", []byte("x"), queue.WithAfter(time.Minute), queue.WithHeader("X-Pad", strings.Repeat("p", 1300)))
	require.ErrorIs(t, err, queue.ErrTooLarge)
	require.ErrorContains(t, err, "timer")
	_, err = w.Send(ctx, "a", make([]byte, 101), queue.WithAfter(time.Minute))
	require.ErrorIs(t, err, queue.ErrTooLarge)
	info, err := env.Client.JetStream().Stream(ctx, wire.TimerStream(w.Name))
	require.NoError(t, err)
	require.Zero(t, info.CachedInfo().State.Msgs, "nothing was stored")

	// A time a moment in the past fires at once.
	p, err := w.Send(ctx, "a", []byte("now"), queue.WithAt(time.Now().Add(-500*time.Millisecond)))
	require.NoError(t, err)
	m, _ := waitFired(t, w, "a", p.At)
	require.Equal(t, "now", string(m.Data))

	// A world without a timer stream (made before timers).
	old := env.World(t, world.Config{})
	js := env.Client.JetStream()
	mb := handles.Of(old).Mailbox.CachedInfo().Config
	mb.Sources = nil
	_, err = js.UpdateStream(ctx, mb)
	require.NoError(t, err)
	require.NoError(t, js.DeleteStream(ctx, wire.TimerStream(old.Name)))
	ow, err := env.Client.World(ctx, old.Name)
	require.NoError(t, err)
	require.False(t, ow.AllowsTimers())
	_, err = ow.Send(ctx, "a", []byte("x"), queue.WithAfter(time.Minute))
	require.ErrorIs(t, err, world.ErrNoTimers)
	require.ErrorContains(t, err, "world add")
	_, err = ow.Send(ctx, "a", []byte("plain posts still work"))
	require.NoError(t, err)
}

// TestTimer_Key: a send with the key of a pending timer replaces it; a
// retry with the same message id names the same timer and is answered as
// a duplicate inside the dedupe window.
func TestTimer_Key(t *testing.T) {
	env := testutil.Start(t, testutil.Target{Name: "single"})
	ctx := testutil.Ctx(t, time.Minute)
	w := env.World(t, world.Config{})
	p1, err := w.Send(ctx, "a", []byte("one"), queue.WithAfter(time.Hour), queue.WithTimerKey("k"))
	require.NoError(t, err)
	require.Equal(t, "k", p1.Key)
	p2, err := w.Send(ctx, "a", []byte("two"), queue.WithAfter(time.Second), queue.WithTimerKey("k"))
	require.NoError(t, err)
	m, _ := waitFired(t, w, "a", p2.At)
	require.Equal(t, "two", string(m.Data), "the second replaced the first")

	r1, err := w.Send(ctx, "b", []byte("x"), queue.WithAfter(time.Hour), queue.WithMsgID("m1"))
	require.NoError(t, err)
	r2, err := w.Send(ctx, "b", []byte("x"), queue.WithAfter(time.Hour), queue.WithMsgID("m1"))
	require.NoError(t, err)
	require.True(t, r2.Duplicate)
	require.Equal(t, r1.Key, r2.Key)
	require.Equal(t, r1.Seq, r2.Seq)
	require.Equal(t, byte('_'), r1.Key[0], "a key fencepost made")
}

// TestTimer_LargestFits: a timer of max_body with exactly as many header
// bytes as a timer may carry (max_headers less wire.TimerReserve) fires
// into its mailbox, with the broker's headers added on the way; the
// reserve is an upper bound, or the copy would be refused and hold back
// every fired timer of the world, which the second timer checks.
func TestTimer_LargestFits(t *testing.T) {
	env := testutil.Start(t, testutil.Target{Name: "single"})
	ctx := testutil.Ctx(t, time.Minute)
	w := env.World(t, world.Config{MaxBody: 100, MaxHeaders: 1500})
	id := strings.Repeat("é", 128) // the longest id: 256 bytes
	room := 1500 - wire.TimerReserve(w.Name, id, "k")
	pad := strings.Repeat("p", room-queue.HeaderSize(nats.Header{"X-Pad": {""}}))
	require.Equal(t, room, queue.HeaderSize(nats.Header{"X-Pad": {pad}}))
	p, err := w.Send(ctx, id, make([]byte, 100), queue.WithAfter(time.Second), queue.WithTimerKey("k"), queue.WithHeader("X-Pad", pad))
	require.NoError(t, err)
	_, err = w.Send(ctx, id, make([]byte, 100), queue.WithAfter(time.Second), queue.WithTimerKey("k"), queue.WithHeader("X-Pad", pad+"p"))
	require.ErrorIs(t, err, queue.ErrTooLarge, "one byte more is refused")
	next, err := w.Send(ctx, "b", []byte("next"), queue.WithAt(p.At.Add(10*time.Millisecond)))
	require.NoError(t, err)
	m, _ := waitFired(t, w, id, p.At)
	require.Len(t, m.Data, 100)
	require.Equal(t, pad, m.Header.Get("X-Pad"))
	size := queue.HeaderSize(m.Header) // as stored (a get through the leader adds none)
	t.Logf("stored headers %d bytes of max_headers 1500 (reserve %d)", size, wire.TimerReserve(w.Name, id, "k"))
	require.LessOrEqual(t, size, 1500)
	m, _ = waitFired(t, w, "b", next.At)
	require.Equal(t, "next", string(m.Data))
}

// TestTimer_LeaderChange (R3): timers pending while the timer stream's
// leader and the mailbox stream's leader step down fire once each, not
// before their time: the schedules are replicated state that every
// replica's store holds and the new leader fires, and the source's
// position is replicated with the mailbox stream.
func TestTimer_LeaderChange(t *testing.T) {
	if len(testutil.Targets()) < 2 {
		t.Skip("a cluster test (FENCEPOST_TEST_CLUSTER=0)")
	}
	env := testutil.Start(t, testutil.Target{Name: "cluster-R3", Cluster: true})
	ctx := testutil.Ctx(t, time.Minute)
	w := env.World(t, world.Config{})
	var ps []queue.Posted
	for i, d := range []time.Duration{1500 * time.Millisecond, 3 * time.Second} {
		p, err := w.Send(ctx, fmt.Sprintf("id-%d", i), []byte("x"), queue.WithAfter(d))
		require.NoError(t, err)
		ps = append(ps, p)
	}
	nc := env.Client.Conn()
	stepDown := func(stream string) {
		testutil.WaitFor(t, 20*time.Second, "a stepdown of "+stream, func() bool {
			m, err := nc.Request("$JS.API.STREAM.LEADER.STEPDOWN."+stream, nil, 2*time.Second)
			return err == nil && strings.Contains(string(m.Data), `"success":true`)
		})
	}
	stepDown(wire.TimerStream(w.Name))
	stepDown(wire.MailboxStream(w.Name))
	for i, p := range ps {
		m, seen := waitFired(t, w, fmt.Sprintf("id-%d", i), p.At)
		require.Equal(t, "x", string(m.Data))
		t.Logf("timer %d: seen %v after its time", i, seen.Sub(p.At))
	}
	stepDown(wire.TimerStream(w.Name))
	testutil.WaitFor(t, 5*time.Second, "settled", func() bool { return time.Since(ps[1].At) > 2*time.Second })
	for i := range ps {
		require.Equal(t, uint64(1), stored(t, w, fmt.Sprintf("id-%d", i)), "fired once")
	}
}
