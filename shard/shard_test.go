package shard_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/drain"
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

// pool runs n workers of w with handler h until the test ends.
func pool(t *testing.T, w *client.World, n int, ttl time.Duration, h drain.Handler) (stop func(i int)) {
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
	l.mu.Lock()
	for id, seqs := range want {
		var got []uint64
		for _, m := range l.calls[id] {
			got = append(got, m.Seq)
		}
		require.Equal(t, seqs, got, "id %s: each message once, in order", id)
	}
	l.mu.Unlock()
	testutil.WaitFor(t, 10*time.Second, "the mailboxes empty", func() bool {
		info, err := w.World.Inspect(ctx, world.InspectOptions{})
		require.NoError(t, err)
		return info.Mailbox.Msgs == 0
	})
}
