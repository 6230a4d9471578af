package client_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/call"
	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/fencing"
	"github.com/fencepost/fencepost/queue"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// runWorker runs a worker of w as node on its own connection (a process
// of its own) until the test ends, or until kill: its connection closes,
// as a killed process's does. done gets Run's end.
func runWorker(t *testing.T, env *testutil.Env, name, node string, ttl time.Duration, h client.Handler, state bool) (kill func(), done <-chan error) {
	t.Helper()
	c, err := client.Connect(env.URL)
	require.NoError(t, err)
	w, err := c.World(context.Background(), name)
	require.NoError(t, err)
	wk, err := w.NewWorker(client.WorkerConfig{Node: node, TTL: ttl, State: state}, h)
	require.NoError(t, err)
	ctx, stop := context.WithCancel(context.Background())
	ch, exited := make(chan error, 1), make(chan struct{})
	go func() {
		ch <- wk.Run(ctx)
		close(exited)
	}()
	var once sync.Once
	kill = func() { once.Do(c.Close) }
	t.Cleanup(func() {
		stop()
		<-exited
		kill()
	})
	return kill, ch
}

// TestCall_Replied: a call to an id that a running worker serves is
// answered with its handler's answer (Message.Reply, CallHandler, a state
// handler's Reply), once committed, in order with the id's other mail; in
// per-id worlds with and without partitions.
func TestCall_Replied(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	for _, tc := range []struct {
		name  string
		cfg   world.Config
		state bool
	}{
		{"plain", world.Config{}, false},
		{"partitions", world.Config{Partitions: 4}, false},
		{"state", world.Config{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testutil.Ctx(t, time.Minute)
			w := env.World(t, tc.cfg)
			var (
				mu   sync.Mutex
				seen = map[string][]string{}
			)
			h := drain.CallHandler(func(_ context.Context, m drain.Message) ([]byte, error) {
				mu.Lock()
				defer mu.Unlock()
				seen[m.ID] = append(seen[m.ID], string(m.Body))
				return fmt.Appendf(nil, "%s after %d", m.Body, len(seen[m.ID])-1), nil
			}).Handler()
			if tc.state {
				h = drain.StateHandler(func(ctx context.Context, m drain.Message, st *drain.State) error {
					v, _ := st.Get("n")
					n := len(v) + 1
					if err := st.Put("n", make([]byte, n)); err != nil {
						return err
					}
					return m.Reply(fmt.Appendf(nil, "%s after %d", m.Body, n-1))
				}).Handler()
			}
			runWorker(t, env, w.Name, "w1", 2*time.Second, h, tc.state)
			for i := range 3 {
				id := fmt.Sprint("id-", i)
				_, err := w.Send(ctx, id, []byte("mail"))
				require.NoError(t, err)
				a, err := w.Call(ctx, id, []byte("hello"))
				require.NoError(t, err)
				require.Equal(t, "hello after 1", string(a.Body), "answered after the id's earlier mail")
				require.Equal(t, id, a.ID)
				require.NotZero(t, a.Seq)
				require.False(t, a.Duplicate)
			}
			// Many calls at once, to one id and to several.
			var wg sync.WaitGroup
			errs := make(chan error, 40)
			for i := range 40 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					id := fmt.Sprint("many-", i%4)
					a, err := w.Call(ctx, id, fmt.Appendf(nil, "c%d", i), client.WithMsgID(fmt.Sprint("k", i)))
					if err == nil && string(a.Body[:len(fmt.Sprint("c", i))]) != fmt.Sprint("c", i) {
						err = fmt.Errorf("call %d answered %q", i, a.Body)
					}
					errs <- err
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
		})
	}
}

// TestCall_Failed: a call whose handler fails every delivery is answered
// failed, with the last handler error, once it was dead-lettered after
// the world's max_deliveries.
func TestCall_Failed(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	ctx := testutil.Ctx(t, time.Minute)
	w := env.World(t, world.Config{MaxDeliveries: 2})
	var calls atomic.Int32
	runWorker(t, env, w.Name, "w1", 2*time.Second, func(_ context.Context, m drain.Message) error {
		calls.Add(1)
		_ = m.Reply([]byte("not sent: the handler failed"))
		return fmt.Errorf("no stock for %s (delivery %d)", m.Body, m.Delivery)
	}, false)
	_, err := w.Call(ctx, "order-1", []byte("widget"))
	var failed *client.CallFailedError
	require.ErrorAs(t, err, &failed)
	require.ErrorIs(t, err, client.ErrCallFailed)
	require.Equal(t, "no stock for widget (delivery 2)", failed.Err)
	require.Equal(t, "order-1", failed.ID)
	require.EqualValues(t, 2, calls.Load())
	dead, err := w.Mailboxes.DeadLetters(ctx, "order-1", 0)
	require.NoError(t, err)
	require.Len(t, dead, 1)
	require.Equal(t, failed.Seq, dead[0].MailboxSeq)
}

// TestCall_KilledWorker: the worker handling a call is killed (its
// connection closes mid-handler: it commits nothing and answers nothing).
// The call is not lost: the next holder handles it and the caller, still
// waiting, gets that holder's answer. A caller that stopped waiting got
// timeout, an unknown outcome, and the call was handled all the same.
func TestCall_KilledWorker(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	ctx := testutil.Ctx(t, time.Minute)
	w := env.World(t, world.Config{})
	const ttl = time.Second
	started := make(chan struct{}, 2)
	kill, done := runWorker(t, env, w.Name, "w1", ttl, func(ctx context.Context, m drain.Message) error {
		started <- struct{}{}
		<-ctx.Done() // stuck until its holding ends
		return ctx.Err()
	}, false)

	waited := make(chan error, 1)
	var answer client.Answer
	go func() {
		var err error
		answer, err = w.Call(ctx, "a", []byte("q1"), client.WithMsgID("k1"))
		waited <- err
	}()
	<-started
	// A second caller gives up early: timeout, unknown.
	tctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err := w.Call(tctx, "a", []byte("q2"))
	cancel()
	var timeout *client.CallTimeoutError
	require.ErrorAs(t, err, &timeout)
	require.ErrorIs(t, err, client.ErrCallTimeout)
	require.True(t, timeout.Posted)
	require.Empty(t, timeout.MsgID)
	kill()
	var cause fencing.Cause
	require.ErrorAs(t, <-done, &cause, "the killed worker self-fences")

	var handled sync.Map
	runWorker(t, env, w.Name, "w2", ttl, drain.CallHandler(func(_ context.Context, m drain.Message) ([]byte, error) {
		handled.Store(string(m.Body), m.Redelivered)
		return []byte("w2:" + string(m.Body)), nil
	}).Handler(), false)
	require.NoError(t, <-waited)
	require.Equal(t, "w2:q1", string(answer.Body))
	testutil.WaitFor(t, 10*time.Second, "the call that timed out is handled", func() bool {
		_, ok := handled.Load("q2")
		return ok
	})
	re, _ := handled.Load("q1")
	require.Equal(t, true, re, "labelled maybe seen before")
	testutil.WaitFor(t, 10*time.Second, "the mailbox is committed", func() bool {
		st, err := w.Mailboxes.Stat(ctx, "a")
		return err == nil && st.Depth == 0
	})
}

// TestCall_RetryRunsOnce: a call that timed out (no worker, then a handler
// that takes long) is retried with the same message id: the retry is not
// stored again, the handler runs once, and the retry gets the first post's
// answer, which is sent after the retry began waiting.
func TestCall_RetryRunsOnce(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	ctx := testutil.Ctx(t, time.Minute)
	w := env.World(t, world.Config{})
	tctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err := w.Call(tctx, "a", []byte("q"), client.WithMsgID("k1"))
	cancel()
	var timeout *client.CallTimeoutError
	require.ErrorAs(t, err, &timeout)
	require.True(t, timeout.Posted, "stored, no worker yet")
	require.Equal(t, "k1", timeout.MsgID)

	var runs atomic.Int32
	release := make(chan struct{})
	runWorker(t, env, w.Name, "w1", 2*time.Second, drain.CallHandler(func(ctx context.Context, m drain.Message) ([]byte, error) {
		runs.Add(1)
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return []byte("done:" + string(m.Body)), nil
	}).Handler(), false)
	testutil.WaitFor(t, 10*time.Second, "the worker handles the call", func() bool { return runs.Load() == 1 })

	// The second try times out too: the handler is still at work.
	tctx, cancel = context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = w.Call(tctx, "a", []byte("q"), client.WithMsgID("k1"))
	cancel()
	require.ErrorAs(t, err, &timeout)
	require.True(t, timeout.Duplicate, "not stored again")

	// The third waits; the handler finishes once it is subscribed.
	subj := call.Subject("_INBOX", w.Name, "a", "k1")
	acc := env.Node.GlobalAccount()
	testutil.WaitFor(t, 10*time.Second, "the calls that timed out unsubscribed", func() bool { return !acc.SubscriptionInterest(subj) })
	got := make(chan error, 1)
	var answer client.Answer
	go func() {
		var err error
		answer, err = w.Call(ctx, "a", []byte("q"), client.WithMsgID("k1"))
		got <- err
	}()
	testutil.WaitFor(t, 10*time.Second, "the retry waits on the call's reply subject", func() bool { return acc.SubscriptionInterest(subj) })
	close(release)
	require.NoError(t, <-got)
	require.Equal(t, "done:q", string(answer.Body))
	require.True(t, answer.Duplicate)
	require.Equal(t, timeout.Seq, answer.Seq)
	testutil.WaitFor(t, 10*time.Second, "committed", func() bool {
		st, err := w.Mailboxes.Stat(ctx, "a")
		return err == nil && st.Depth == 0
	})
	require.EqualValues(t, 1, runs.Load(), "the handler ran once for three tries")
}

// TestCall_Refusals: what Send refuses, Call refuses, storing nothing; a
// connection whose inbox is not under _INBOX cannot call.
func TestCall_Refusals(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	ctx := testutil.Ctx(t, time.Minute)
	w := env.World(t, world.Config{})
	_, err := w.Call(ctx, "", []byte("x"))
	require.Error(t, err)
	_, err = w.Call(ctx, "a", make([]byte, w.Queue.MaxBody()+1))
	require.ErrorIs(t, err, queue.ErrTooLarge)
	c, err := client.Connect(env.URL, client.WithInboxPrefix("_MYBOX"))
	require.NoError(t, err)
	defer c.Close()
	w2, err := c.World(ctx, w.Name)
	require.NoError(t, err)
	_, err = w2.Call(ctx, "a", []byte("x"))
	require.ErrorIs(t, err, client.ErrInvalidOption)
	st, err := w.Mailboxes.Stat(ctx, "a")
	require.NoError(t, err)
	require.Zero(t, st.Depth, "nothing stored")
}
