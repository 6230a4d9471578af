package worker_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/worker"
	"github.com/fencepost/fencepost/world"
)

// TestRetry_FailedDeliveries (a newcomer's report): a worker of every
// id, on a world with partitions and on one without. A message whose
// first delivery fails is delivered again after the backoff, whether its
// id was claimed for it (a new id) or already held: well within 3 s, far
// under the idle release (30 s) and the backstop scan (6 periods of
// 10 s). A message that always fails gets exactly max_deliveries handler
// calls, counted 1, 2, 3..., then exactly one dead letter, and the id's
// next message is delivered. The world's other mail keeps flowing.
// Everything is observed through the handler and the dead letters, so the
// test holds for any delivery engine.
//
// On a sharded world (shards=4) the same holds per id: the failing ids
// are pending in their shard's cursor while the shard's other ids move on.
func TestRetry_FailedDeliveries(t *testing.T) {
	for _, cfg := range []world.Config{{Partitions: 0}, {Partitions: 4}, {Shards: 4}} {
		name := fmt.Sprintf("partitions=%d", cfg.Partitions)
		if cfg.Shards > 0 {
			name = fmt.Sprintf("shards=%d", cfg.Shards)
		}
		t.Run(name, func(t *testing.T) {
			failedDeliveries(t, cfg)
		})
	}
}

// call is one handler call.
type call struct {
	seq      uint64
	body     string
	delivery int
	at       time.Time
}

type calls struct {
	mu   sync.Mutex
	byID map[string][]call
}

func (c *calls) add(m drain.Message) (n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.byID[m.ID] = append(c.byID[m.ID], call{m.Seq, string(m.Body), m.Delivery, time.Now()})
	for _, k := range c.byID[m.ID] {
		if k.seq == m.Seq {
			n++
		}
	}
	return n
}

// of is id's calls with body.
func (c *calls) of(id, body string) []call {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []call
	for _, k := range c.byID[id] {
		if k.body == body {
			out = append(out, k)
		}
	}
	return out
}

func failedDeliveries(t *testing.T, cfg world.Config) {
	const maxDeliveries = 5
	env := testutil.Start(t, testutil.Target{Name: "single"})
	cfg.MaxDeliveries = maxDeliveries
	w := env.World(t, cfg)
	ctx := testutil.Ctx(t, 2*time.Minute)
	rec := &calls{byID: map[string][]call{}}
	wk, err := w.NewWorker(worker.Config{
		Node: "n1", TTL: 2 * time.Second,
		Scan: 10 * time.Second, Idle: 30 * time.Second, // the backstops: far away
		DrainOptions: []drain.Option{drain.WithBackoff(50*time.Millisecond, 200*time.Millisecond)},
	}, func(_ context.Context, m drain.Message) error {
		n := rec.add(m)
		switch string(m.Body) {
		case "poison":
			return errors.New("poison")
		case "flaky":
			if n == 1 {
				return errors.New("flaky: the first call fails")
			}
		}
		return nil
	})
	require.NoError(t, err)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- wk.Run(rctx) }()
	defer func() { stop(); require.NoError(t, <-done) }()

	send := func(id, body string) {
		t.Helper()
		_, err := w.Send(ctx, id, []byte(body))
		require.NoError(t, err)
	}
	handled := func(id, body string) bool {
		cs := rec.of(id, body)
		return len(cs) > 0 && body != "poison" && body != "flaky" || len(cs) >= 2 && body == "flaky"
	}
	var others []string
	for i := range 6 {
		others = append(others, fmt.Sprint("other-", i))
	}
	// Ids held when their bad message comes: each has had mail delivered.
	warm := append([]string{"held-flaky", "held-poison"}, others...)
	for _, id := range warm {
		send(id, "warm")
	}
	testutil.WaitFor(t, 30*time.Second, "the first mail delivered", func() bool {
		for _, id := range warm {
			if !handled(id, "warm") {
				return false
			}
		}
		return true
	})

	// The bad messages, to held ids and to ids claimed for them, among
	// good ones.
	sent := time.Now()
	for _, prefix := range []string{"held-", "fresh-"} {
		send(prefix+"flaky", "flaky")
		send(prefix+"poison", "poison")
		send(prefix+"poison", "after")
	}
	for i, id := range others {
		send(id, fmt.Sprint("ok-", i))
	}
	// 10 s: the slowest expected path is 4 backoffs of at most 200 ms; a
	// retry that waits for the idle release or the scan takes 30 s.
	// What is missing then is told by the checks below, one by one.
	all := func() bool {
		for _, prefix := range []string{"held-", "fresh-"} {
			if !handled(prefix+"flaky", "flaky") || !handled(prefix+"poison", "after") {
				return false
			}
		}
		for i, id := range others {
			if !handled(id, fmt.Sprint("ok-", i)) {
				return false
			}
		}
		return true
	}
	for deadline := time.Now().Add(10 * time.Second); !all() && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("handled after %v: %v", time.Since(sent).Round(time.Millisecond), all())

	deliveries := func(cs []call) []int {
		var out []int
		for _, c := range cs {
			out = append(out, c.delivery)
		}
		return out
	}
	// Each call after a failure comes after the backoff, not after a
	// backstop.
	promptly := func(id string, cs []call) {
		t.Helper()
		for i := 1; i < len(cs); i++ {
			assert.Less(t, cs[i].at.Sub(cs[i-1].at), 3*time.Second, "%s: call %d came %v after the failed one", id, i+1, cs[i].at.Sub(cs[i-1].at))
		}
	}
	for _, prefix := range []string{"held-", "fresh-"} {
		id := prefix + "flaky"
		cs := rec.of(id, "flaky")
		assert.Equal(t, []int{1, 2}, deliveries(cs), "%s: the failed message is delivered again, counted", id)
		promptly(id, cs)

		id = prefix + "poison"
		cs = rec.of(id, "poison")
		assert.Equal(t, []int{1, 2, 3, 4, 5}, deliveries(cs), "%s: max_deliveries calls, counted 1, 2, 3...", id)
		promptly(id, cs)
		dl, err := w.Mailboxes.DeadLetters(ctx, id, 10)
		require.NoError(t, err)
		assert.Len(t, dl, 1, "%s: one dead letter", id)
		assert.Equal(t, []int{1}, deliveries(rec.of(id, "after")), "%s: the message after the dead letter, once", id)
	}
	for i, id := range others {
		assert.Equal(t, []int{1}, deliveries(rec.of(id, fmt.Sprint("ok-", i))), id)
	}
}
