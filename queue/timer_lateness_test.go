package queue_test

import (
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/queue"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// TestTimer_Lateness measures how late timers enter their mailboxes:
// FENCEPOST_TIMER_LATENESS=N sets N timers of 2 s, 10 ms apart, each for
// its own id, and logs the p50, p99 and max of the delay between a
// timer's time and its arrival at a reader of the mailbox stream (an
// ordered consumer), and of its stored time. Skipped without it; it
// asserts only that none came early.
//
//	FENCEPOST_TIMER_LATENESS=100 go test -count=1 ./queue -run TestTimer_Lateness -v
func TestTimer_Lateness(t *testing.T) {
	var n int
	if _, err := fmt.Sscan(os.Getenv("FENCEPOST_TIMER_LATENESS"), &n); err != nil || n < 1 {
		t.Skip("set FENCEPOST_TIMER_LATENESS=N to measure N timers")
	}
	for _, tg := range testutil.Targets() {
		t.Run(tg.Name, func(t *testing.T) {
			env := testutil.Start(t, tg)
			for _, shards := range []int{0, 4} {
				t.Run(fmt.Sprintf("shards=%d", shards), func(t *testing.T) { measureLateness(t, env, shards, n) })
			}
		})
	}
}

func measureLateness(t *testing.T, env *testutil.Env, shards, n int) {
	ctx := testutil.Ctx(t, 5*time.Minute)
	w := env.World(t, world.Config{Shards: shards})
	filter := wire.MailboxFilter(w.Name)
	if shards > 0 {
		filter = wire.ShardedMailboxFilter(w.Name)
	}
	cons, err := handles.Of(w).Mailbox.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}})
	require.NoError(t, err)
	type arrival struct{ seen, stored time.Time }
	got := make(chan arrival, n)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		md, _ := m.Metadata()
		got <- arrival{time.Now(), md.Timestamp}
	})
	require.NoError(t, err)
	defer cc.Stop()
	var at []time.Time
	for i := 0; i < n; i++ {
		p, err := w.Send(ctx, fmt.Sprintf("id-%d", i), []byte("x"), queue.WithAfter(2*time.Second))
		require.NoError(t, err)
		at = append(at, p.At)
		time.Sleep(10 * time.Millisecond) // spread the timers out, as a flow of them would be
	}
	var seen, stored []time.Duration
	for range n {
		select {
		case a := <-got:
			// Arrivals come in the order of their times (10 ms apart): the
			// i-th arrival is the i-th timer.
			i := len(seen)
			require.False(t, a.stored.Before(at[i]), "stored %v before its time", at[i].Sub(a.stored))
			seen, stored = append(seen, a.seen.Sub(at[i])), append(stored, a.stored.Sub(at[i]))
		case <-ctx.Done():
			t.Fatalf("%d of %d timers arrived", len(seen), n)
		}
	}
	pct := func(d []time.Duration) string {
		slices.Sort(d)
		q := func(p float64) time.Duration { return d[min(len(d)-1, int(p*float64(len(d))))].Round(time.Millisecond) }
		return fmt.Sprintf("p50=%v p99=%v max=%v", q(0.50), q(0.99), d[len(d)-1].Round(time.Millisecond))
	}
	t.Logf("%d timers of 2 s, shards=%d: arrival after their time %s; stored after their time %s", n, shards, pct(seen), pct(stored))
}
