package follow_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
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
		Consumer: jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy},
		Pull:     []jetstream.PullMessagesOpt{jetstream.PullMaxMessages(16)},
		Reset:    func(error) { resets.Add(1) },
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
		Consumer: jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy},
		Pull:     []jetstream.PullMessagesOpt{jetstream.PullMaxMessages(16), jetstream.PullHeartbeat(time.Second)},
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
