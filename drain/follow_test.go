package drain_test

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/testkit/faults"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// Reads across a cut connection: what was on its way is lost, and the
// reader must see it, never take what comes next for what follows.
//
//   - The reads through a consumer (a deep mailbox's follower, DrainAll's
//     scan) use AckNone consumers: what the server sent on one is never
//     sent again, and the consumer goes on after it. These tests cut while
//     a consumer's messages are on their way (a proxy delays them).
//   - A batched direct get's answer is sent to whoever subscribes to its
//     reply subject at each moment: a reconnect in the middle of it loses
//     its first messages and keeps its end (TestHolding_CutWhileReading).
//
// Each checks that every message is still delivered, in order.

// viaProxy opens w's world through a proxy that delays everything by
// latency until the proxy is cut; it returns the proxy and the world.
func viaProxy(t *testing.T, env *testutil.Env, w *client.World, latency time.Duration) (*faults.Proxy, *client.World) {
	t.Helper()
	p, err := faults.NewProxy(strings.TrimPrefix(env.Node.ClientURL(), "nats://"))
	require.NoError(t, err)
	t.Cleanup(p.Close)
	// Reconnects at once: while the server may still be sending an
	// answer begun on the connection that was cut.
	pc, err := client.Connect(p.URL(), client.WithTimeout(10*time.Second),
		client.WithNATSOptions(nats.MaxReconnects(-1), nats.ReconnectWait(time.Millisecond), nats.ReconnectJitter(0, 0)))
	require.NoError(t, err)
	t.Cleanup(pc.Close)
	ctx := testutil.Ctx(t, 30*time.Second)
	pw, err := pc.World(ctx, w.Name)
	require.NoError(t, err)
	p.SetLatency(latency)
	return p, pw
}

// cutWhenSent cuts every connection of p (and ends its latency) as soon
// as the mailbox consumer described as desc has sent a message: those
// messages are on their way through the delayed proxy, and lost. It
// returns a channel closed once it cut.
func cutWhenSent(t *testing.T, w *client.World, p *faults.Proxy, desc string) <-chan struct{} {
	return cutWhen(t, w, p, desc, func(ci *jetstream.ConsumerInfo) bool { return ci.Delivered.Consumer > 0 })
}

// cutWhen is cutWhenSent once the consumer's info satisfies sent.
func cutWhen(t *testing.T, w *client.World, p *faults.Proxy, desc string, sent func(*jetstream.ConsumerInfo) bool) <-chan struct{} {
	t.Helper()
	cut := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			names := handles.Of(w).Mailbox.ListConsumers(ctx)
			for ci := range names.Info() {
				if ci.Config.Description == desc && sent(ci) {
					p.CutAll()
					p.SetLatency(0)
					close(cut)
					return
				}
			}
			time.Sleep(time.Millisecond)
		}
	}()
	return cut
}

// drainTimeout bounds one drain of these tests: a request whose answer the
// cut lost waits for its deadline.
const drainTimeout = 15 * time.Second

// postMany posts n messages of body to id's mailbox and returns their
// sequences.
func postMany(t *testing.T, ctx context.Context, w *client.World, id string, n int, body []byte) []uint64 {
	t.Helper()
	js := handles.Of(w).JS
	futs := make([]jetstream.PubAckFuture, n)
	for i := range futs {
		f, err := js.PublishAsync(wire.MailboxSubject(w.Name, id), body)
		require.NoError(t, err)
		futs[i] = f
	}
	seqs := make([]uint64, n)
	for i, f := range futs {
		select {
		case a := <-f.Ok():
			seqs[i] = a.Sequence
		case err := <-f.Err():
			t.Fatal(err)
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}
	return seqs
}

// seqRecorder is a handler that records the sequences it was handed.
type seqRecorder struct{ seqs []uint64 }

func (r *seqRecorder) handle(_ context.Context, m drain.Message) error {
	r.seqs = append(r.seqs, m.Seq)
	return nil
}

// A drain reads a deep mailbox (followThreshold messages after its first
// batch) through a consumer; the connection is cut while the consumer's
// first messages are on their way.
func TestDrain_DeepMailbox_CutWhileFollowing(t *testing.T) {
	env := testutil.Start(t, testutil.Target{Name: "single"})
	ctx := testutil.Ctx(t, 2*time.Minute)
	w, _ := newWorld(t, env, world.Config{})
	const batch = 50
	want := postMany(t, ctx, w, "x", 2*drain.DefaultBatch+3*batch, []byte("m"))
	p, pw := viaProxy(t, env, w, 200*time.Millisecond)
	d, err := drain.New(pw.World, pw.Ownership, drain.WithBatch(batch))
	require.NoError(t, err)
	lease, err := pw.Ownership.Claim(ctx, "x", "n1", time.Minute)
	require.NoError(t, err)
	cut := cutWhenSent(t, w, p, "fencepost drain of x")
	var rec seqRecorder
	for drains := 0; len(rec.seqs) < len(want) || drains == 0; drains++ {
		require.Less(t, drains, 10, "the mailbox did not empty")
		dctx, cancel := context.WithTimeout(ctx, drainTimeout)
		_, err := d.DrainLease(dctx, lease, rec.handle)
		cancel()
		if err != nil {
			t.Logf("drain: %v", err) // the cut may fail a request, or lose its answer; drain again
		}
		if stored(t, w, wire.MailboxSubject(w.Name, "x")) == 0 {
			break
		}
	}
	require.True(t, isClosed(cut), "the follower's consumer never sent a message: nothing was cut")
	require.Equal(t, want, dedupe(rec.seqs), "every message, in order, none skipped")
}

// A consumer read cut once the consumer has sent its last message: the
// tail is lost, and nothing comes after it to show a gap in the delivery
// sequence. The read sees that the connection was made again while it
// waited, and says messages were lost (the drain then reads from its
// cursor), instead of waiting for a message that will not come until its
// context ends.
func TestConsumerRead_TailLostAcrossAReconnect(t *testing.T) {
	env := testutil.Start(t, testutil.Target{Name: "single"})
	ctx := testutil.Ctx(t, 2*time.Minute)
	w, _ := newWorld(t, env, world.Config{})
	want := postMany(t, ctx, w, "x", 300, []byte("m"))
	p, pw := viaProxy(t, env, w, 200*time.Millisecond)
	const desc = "a read whose tail is cut"
	cons, err := handles.Of(pw).Mailbox.CreateConsumer(ctx, jetstream.ConsumerConfig{
		FilterSubject: wire.MailboxSubject(w.Name, "x"), AckPolicy: jetstream.AckNonePolicy, MemoryStorage: true, Description: desc,
	})
	require.NoError(t, err)
	cut := cutWhen(t, w, p, desc, func(ci *jetstream.ConsumerInfo) bool {
		return ci.NumPending == 0 && ci.Delivered.Stream == want[len(want)-1]
	})
	rd, err := drain.ReadConsumer(handles.Of(pw).JS.Conn(), cons, jetstream.PullMaxMessages(1000))
	require.NoError(t, err)
	defer rd.Stop()
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var got int
	for {
		_, err := rd.Next(rctx)
		if err != nil {
			require.ErrorIs(t, err, drain.ErrConsumerGap, "the read waited for the lost tail until its context ended")
			break
		}
		got++
	}
	require.True(t, isClosed(cut), "the consumer never sent its last message: nothing was cut")
	require.Less(t, got, len(want), "what was on its way at the cut never came")
}

// dedupe drops what was handed out again (a drain that failed after a
// delivery hands it out again): at least once, in order.
func dedupe(seqs []uint64) []uint64 {
	var out []uint64
	for _, s := range seqs {
		if len(out) == 0 || s > out[len(out)-1] {
			out = append(out, s)
		}
	}
	return out
}

// A holding's drain reads its mailbox with batched direct gets through a
// connection that is cut in the middle of an answer, and reconnects at
// once. The server sends each message of an answer to whoever subscribes
// to the reply subject at that moment, so an answer that straddles the
// client's reconnect arrives without its first messages but with its end
// of batch: the drain must not take such a batch for its mailbox from the
// cursor. It fails the read instead (jsapi.ErrIncomplete) and drains
// again; every message is delivered, in order.
func TestHolding_CutWhileReading(t *testing.T) {
	env := testutil.Start(t, testutil.Target{Name: "single"})
	ctx := testutil.Ctx(t, 3*time.Minute)
	w, _ := newWorld(t, env, world.Config{MaxMsgSize: 8 << 10})
	p, pw := viaProxy(t, env, w, 0)
	d, err := drain.New(pw.World, pw.Ownership)
	require.NoError(t, err)
	ss, err := pw.Ownership.OpenSession(ctx, "n1", time.Minute)
	require.NoError(t, err)
	defer ss.Close()
	l, err := ss.Claim(ctx, "x")
	require.NoError(t, err)
	h, err := d.Hold(l)
	require.NoError(t, err)
	var rec seqRecorder
	var want []uint64
	body := []byte(strings.Repeat("m", 7<<10)) // an answer of 7 MB: the server sends it for a while
	for round := 0; round < 20; round++ {
		want = append(want, postMany(t, ctx, w, "x", 1000, body)...)
		p.CutAfter(int64(64<<10 + rand.IntN(512<<10))) // within the read's answer
		for attempt := 0; ; attempt++ {
			require.Less(t, attempt, 20, "round %d: the drain never read to the end", round)
			// The read that is cut: an answer lost whole is waited for
			// half a second, not for as long as a loaded machine may
			// need for a read that is not cut.
			wait := drainTimeout
			if attempt == 0 {
				wait = 500 * time.Millisecond
			}
			dctx, cancel := context.WithTimeout(ctx, wait)
			_, err := h.Drain(dctx, rec.handle)
			cancel()
			if err == nil && h.Live() {
				break // read to the end of the mailbox
			}
			t.Logf("round %d: %v", round, err) // cut: drain again
		}
		p.CutAfter(0)
		require.Equal(t, want, dedupe(rec.seqs), "round %d: every message, in order, none skipped", round)
	}
}

// isClosed says whether c is closed, without waiting.
func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
