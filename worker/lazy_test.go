package worker_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/worker"
	"github.com/fencepost/fencepost/world"
)

// TestPool_IdleIdsOfADeadNodeStayFree: when a node dies, the others claim
// at once only the ids of it that have mail waiting (here: one whose
// handler never returned); its idle ids stay free until mail comes for
// them, and then they are claimed and delivered as any new id.
func TestPool_IdleIdsOfADeadNodeStayFree(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{})
	ctx := testutil.Ctx(t, 2*time.Minute)
	const ttl = time.Second
	lg := newLedger()
	stuck := make(chan struct{}) // closed once the first node is dead
	type running struct {
		wk   *worker.Worker
		c    *client.Client
		stop context.CancelFunc
		done chan error
	}
	start := func(node string, h drain.Handler) *running {
		c, err := client.Connect(env.URL)
		require.NoError(t, err)
		cw, err := c.World(ctx, w.Name)
		require.NoError(t, err)
		wk, err := cw.NewWorker(worker.Config{Node: node, TTL: ttl}, h)
		require.NoError(t, err)
		rctx, stop := context.WithCancel(ctx)
		r := &running{wk: wk, c: c, stop: stop, done: make(chan error, 1)}
		go func() { r.done <- wk.Run(rctx) }()
		return r
	}
	record := lg.handler("a")
	a := start("a", func(ctx context.Context, m drain.Message) error {
		if string(m.Body) == "stuck" {
			select { // a's handler does not return while a lives
			case <-stuck:
			case <-ctx.Done():
			}
			return ctx.Err()
		}
		return record(ctx, m)
	})
	b := start("b", lg.handler("b"))
	defer func() {
		for _, r := range []*running{a, b} {
			r.stop()
			<-r.done
			r.c.Close()
		}
	}()
	testutil.WaitFor(t, 30*time.Second, "both node leases", func() bool { return a.wk.Session() != nil && b.wk.Session() != nil })
	// Each has listed the other before the mail comes: a worker whose
	// list does not have the other node yet is every id's first choice,
	// and a, listed alone, took all 40 ids now and then (b held none: 3
	// runs of 20 with drain's tests beside).
	testutil.WaitFor(t, 30*time.Second, "each node lists both", func() bool {
		for _, r := range []*running{a, b} {
			if p := worker.Peers(r.wk); !slices.Contains(p, "a") || !slices.Contains(p, "b") {
				return false
			}
		}
		return true
	})

	ids := make([]string, 40)
	for i := range ids {
		ids[i] = fmt.Sprint("id-", i)
		_, err := w.Queue.Send(ctx, ids[i], []byte("1"))
		require.NoError(t, err)
	}
	testutil.WaitFor(t, time.Minute, "every message delivered", func() bool { return lg.delivered() == len(ids) })
	aIDs := a.wk.Held()
	require.NotEmpty(t, aIDs, "a holds some of the ids")
	require.NotEmpty(t, b.wk.Held(), "b holds some of the ids")
	// b knows every message of a's ids is committed (its sweeper follows
	// the cursors)...
	testutil.WaitFor(t, 30*time.Second, "a's commits seen by b", func() bool {
		for _, id := range aIDs {
			if worker.Unread(b.wk, id) {
				return false
			}
		}
		return true
	})
	// ...but not one of a's ids that a holds with a message not done.
	slow := aIDs[0]
	_, err := w.Queue.Send(ctx, slow, []byte("stuck"))
	require.NoError(t, err)
	testutil.WaitFor(t, 30*time.Second, "b sees the waiting message", func() bool { return worker.Unread(b.wk, slow) })

	// a dies (its connection with it): its node lease lapses.
	a.c.Close()
	close(stuck)
	testutil.WaitFor(t, 30*time.Second, "b takes the id with mail waiting", func() bool { return slices.Contains(b.wk.Held(), slow) })
	idle := aIDs[1:]
	for _, id := range idle {
		require.NotContains(t, b.wk.Held(), id, "b claimed %s, an idle id of the dead node", id)
	}
	// Mail for one of them: claimed and delivered then.
	if len(idle) > 0 {
		x := idle[0]
		_, err := w.Queue.Send(ctx, x, []byte("2"))
		require.NoError(t, err)
		testutil.WaitFor(t, 30*time.Second, "b delivers mail to an idle id of the dead node", func() bool {
			lg.mu.Lock()
			defer lg.mu.Unlock()
			ds := lg.byID[x]
			return len(ds) > 0 && ds[len(ds)-1].node == "b"
		})
		// The others stayed free all along (checked over a window, as a
		// claim would have run by now: freed ids are tried after 50 ms).
		deadline := time.Now().Add(time.Second)
		for time.Now().Before(deadline) {
			held := b.wk.Held()
			for _, id := range idle[1:] {
				require.NotContains(t, held, id, "b claimed %s, an idle id of the dead node", id)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}
