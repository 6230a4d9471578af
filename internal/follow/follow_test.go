package follow_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/internal/follow"
	"github.com/fencepost/fencepost/server/servertest"
)

// calls records what a follower's callback saw: the stream sequences in
// the order of the calls, and whether two calls ever overlapped.
type calls struct {
	mu      sync.Mutex
	seqs    []uint64
	in      atomic.Int32
	overlap atomic.Bool
}

func (c *calls) enter() {
	if c.in.Add(1) > 1 {
		c.overlap.Store(true)
	}
}

func (c *calls) leave(meta *jetstream.MsgMetadata, err error) {
	if err == nil {
		c.mu.Lock()
		c.seqs = append(c.seqs, meta.Sequence.Stream)
		c.mu.Unlock()
	}
	c.in.Add(-1)
}

func (c *calls) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.seqs)
}

// inOrder checks that seqs are exactly 1..n, in that order.
func (c *calls) inOrder(t *testing.T, n int) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	want := make([]uint64, n)
	for i := range want {
		want[i] = uint64(i + 1)
	}
	require.Equal(t, want, c.seqs, "every message once, in stream order")
	require.False(t, c.overlap.Load(), "the callback was called on two goroutines at once")
}

func stream(t *testing.T, url string) (jetstream.JetStream, jetstream.Stream) {
	t.Helper()
	_, js := servertest.Connect(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "F", Subjects: []string{"f.>"}})
	require.NoError(t, err)
	return js, s
}

func publish(t *testing.T, js jetstream.JetStream, from, to int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := from; i <= to; i++ {
		_, err := js.Publish(ctx, fmt.Sprintf("f.%d", i%7), []byte(fmt.Sprint(i)))
		require.NoError(t, err)
	}
}

// TestFollow_ResetWhileHandling: the client reconnects (the server
// restarted) while the callback is still handling a message. nats.go's
// ordered Consume remakes its consumer on the reconnect, from another
// goroutine, after the message being handled, and calls the callback with
// the next one on the new consumer's goroutine before the first call
// returned: out of order, two at a time. The worker's feed lost a message
// so in a cluster soak round (a member killed, its clients reconnecting;
// docs/reliability.md). A Follower gives the next message only after the
// callback returned, and every message once, in order.
func TestFollow_ResetWhileHandling(t *testing.T) {
	node := servertest.New(t)
	js, s := stream(t, node.ClientURL())
	const n, hold = 200, 50
	publish(t, js, 1, n)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	var c calls
	var resets atomic.Int32
	holding, release := make(chan struct{}), make(chan struct{})
	f, err := follow.Start(ctx, s, follow.Options{
		ReadAhead: 16,
		Reset:     func(error) { resets.Add(1) },
	}, func(_ jetstream.Msg, meta *jetstream.MsgMetadata, err error) {
		c.enter()
		if err == nil && meta.Sequence.Stream == hold {
			close(holding)
			<-release
		}
		c.leave(meta, err)
	})
	require.NoError(t, err)
	defer f.Stop()

	<-holding
	node.Restart(t)
	publish(t, js, n+1, n+50) // returns once the client reconnected
	// Wait until a call overlaps, or the consumer's replacement had ample
	// time to deliver (Consume's did within milliseconds of the
	// reconnect); nothing is expected to happen, so this waits out the
	// bound.
	deadline := time.Now().Add(2 * time.Second)
	for !c.overlap.Load() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	require.False(t, c.overlap.Load(), "a call while the held one had not returned")
	close(release)

	require.Eventually(t, func() bool { return c.count() >= n+50 }, 30*time.Second, 10*time.Millisecond)
	c.inOrder(t, n+50)
	require.Positive(t, resets.Load(), "the consumer was replaced")
}

// TestFollow_ServerRestart: a follower outlives a restart of the server
// under it (its consumer, in memory, is gone after it) and gives every
// message once, in order, the ones posted while the server was down
// included.
func TestFollow_ServerRestart(t *testing.T) {
	node := servertest.New(t)
	js, s := stream(t, node.ClientURL())
	publish(t, js, 1, 100)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var c calls
	f, err := follow.Start(ctx, s, follow.Options{
		ReadAhead: 16,
	}, func(_ jetstream.Msg, meta *jetstream.MsgMetadata, err error) {
		c.enter()
		c.leave(meta, err)
	})
	require.NoError(t, err)

	require.Eventually(t, func() bool { return c.count() >= 100 }, 30*time.Second, 10*time.Millisecond)
	node.Restart(t)
	publish(t, js, 101, 300)
	require.Eventually(t, func() bool { return c.count() >= 300 }, time.Minute, 10*time.Millisecond)
	c.inOrder(t, 300)

	f.Stop()
	select {
	case <-f.Done():
	case <-time.After(15 * time.Second):
		t.Fatal("the follower did not end after Stop")
	}
	publish(t, js, 301, 310)
	require.Equal(t, 300, c.count(), "no call after Done")
}

// TestFollow_ConsumerDeleted: the follower's consumer is deleted under it,
// again and again; each time it reads again from the message after the
// last one handed out (two missed heartbeats tell it the consumer is
// gone), tells Reset, and gives every message once, in order.
func TestFollow_ConsumerDeleted(t *testing.T) {
	node := servertest.New(t)
	js, s := stream(t, node.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	var c calls
	var resets atomic.Int32
	f, err := follow.Start(ctx, s, follow.Options{ReadAhead: 8, Reset: func(error) { resets.Add(1) }},
		func(_ jetstream.Msg, meta *jetstream.MsgMetadata, err error) {
			c.enter()
			c.leave(meta, err)
		})
	require.NoError(t, err)
	defer f.Stop()
	for round := range 3 {
		publish(t, js, 100*round+1, 100*round+100)
		require.Eventually(t, func() bool { return c.count() >= 100*(round+1) }, 30*time.Second, 10*time.Millisecond)
		names := s.ConsumerNames(ctx)
		for name := range names.Name() {
			require.NoError(t, s.DeleteConsumer(ctx, name))
		}
		require.NoError(t, names.Err())
	}
	publish(t, js, 301, 350)
	require.Eventually(t, func() bool { return c.count() >= 350 }, 30*time.Second, 10*time.Millisecond)
	c.inOrder(t, 350)
	require.GreaterOrEqual(t, resets.Load(), int32(3), "a reset per deleted consumer")
}

// TestFollow_FilterFromAndPending: a follower reads only its subjects,
// from its start on, and says how many of them are stored after the last
// one it handed out; Stop deletes its consumer at once.
func TestFollow_FilterFromAndPending(t *testing.T) {
	node := servertest.New(t)
	js, s := stream(t, node.ClientURL())
	publish(t, js, 1, 70) // f.0 .. f.6, ten each
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	var mu sync.Mutex
	var got []uint64
	gate := make(chan struct{})
	f, err := follow.Start(ctx, s, follow.Options{Filter: []string{"f.1", "f.2"}, From: 30, ReadAhead: 4},
		func(m jetstream.Msg, meta *jetstream.MsgMetadata, err error) {
			// On the follower's goroutine: assert, as require would stop
			// only this goroutine.
			if !assert.NoError(t, err) {
				return
			}
			assert.Contains(t, []string{"f.1", "f.2"}, m.Subject())
			mu.Lock()
			got = append(got, meta.Sequence.Stream)
			n := len(got)
			mu.Unlock()
			if n == 3 {
				<-gate
			}
		})
	require.NoError(t, err)
	// Messages 30..70 on f.1 or f.2: i%7 is 1 or 2, that is 36, 37, 43, 44, ..., 65.
	var want []uint64
	for i := uint64(30); i <= 70; i++ {
		if i%7 == 1 || i%7 == 2 {
			want = append(want, i)
		}
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == 3
	}, 10*time.Second, 5*time.Millisecond)
	require.EqualValues(t, len(want)-3, f.Pending(), "stored after the third handed out")
	close(gate)
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == len(want)
	}, 10*time.Second, 5*time.Millisecond)
	mu.Lock()
	require.Equal(t, want, got)
	mu.Unlock()
	require.Zero(t, f.Pending())

	f.Stop()
	<-f.Done()
	require.Eventually(t, func() bool {
		info, err := s.Info(ctx)
		return err == nil && info.State.Consumers == 0
	}, 5*time.Second, 10*time.Millisecond, "the consumer left at Stop (inactive after 10 s otherwise)")
}

// TestFollow_LeaderDies: a follower of an R3 stream reads on when the
// stream's leader dies (its consumer, R1 in memory, may die with it, or
// stop hearing from it): every message once, in order, those posted
// while the stream had no leader included.
func TestFollow_LeaderDies(t *testing.T) {
	cl := servertest.NewCluster(t, 3)
	_, js := servertest.Connect(t, cl.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := servertest.CreateStream(t, js, jetstream.StreamConfig{Name: "F", Subjects: []string{"f.>"}, Replicas: 3})
	publish(t, js, 1, 100)

	var c calls
	var last atomic.Int64
	f, err := follow.Start(ctx, s, follow.Options{ReadAhead: 16, Reset: func(err error) { t.Logf("%v reset: %v (%d read)", time.Now().Format("15:04:05.000"), err, c.count()) }}, func(_ jetstream.Msg, meta *jetstream.MsgMetadata, err error) {
		c.enter()
		last.Store(time.Now().UnixNano())
		c.leave(meta, err)
	})
	require.NoError(t, err)
	defer f.Stop()
	require.Eventually(t, func() bool { return c.count() >= 100 }, 30*time.Second, 10*time.Millisecond)
	killed := time.Now()
	leader, _ := cl.StopStreamLeader(t, s)
	publish(t, js, 101, 200)
	require.Eventually(t, func() bool { return c.count() >= 200 }, time.Minute, 10*time.Millisecond)
	t.Logf("every message read %v after the leader %s died", time.Unix(0, last.Load()).Sub(killed).Round(time.Millisecond), leader.Name())
	c.inOrder(t, 200)
}
