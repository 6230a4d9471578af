package worker_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/worker"
	"github.com/fencepost/fencepost/world"
)

// TestTakeoverGap measures the takeover gap: from the moment an owner has
// released (graceful stop: its node lease ended) or died (its connection
// cut), with a message posted to its id at that moment, to the delivery of
// that message by the standby. It prints p50 and p99 of each. Set
// FENCEPOST_TAKEOVER_ROUNDS (e.g. 50) to run it:
//
//	FENCEPOST_TAKEOVER_ROUNDS=50 go test -run TestTakeoverGap -v ./worker/
func TestTakeoverGap(t *testing.T) {
	rounds, _ := strconv.Atoi(os.Getenv("FENCEPOST_TAKEOVER_ROUNDS"))
	if rounds <= 0 {
		t.Skip("set FENCEPOST_TAKEOVER_ROUNDS to measure")
	}
	const ttl = 500 * time.Millisecond
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{})
	ctx := testutil.Ctx(t, 10*time.Minute)
	got := make(chan string, 64)

	type node struct {
		c    *client.Client
		stop context.CancelFunc
		done chan error
	}
	n := 0
	start := func() *node {
		n++
		name := fmt.Sprint("n", n)
		c, err := client.Connect(env.URL)
		require.NoError(t, err)
		cw, err := c.World(ctx, w.Name)
		require.NoError(t, err)
		wk, err := cw.NewWorker(worker.Config{Node: name, TTL: ttl, IDs: []string{"x"}}, func(ctx context.Context, m drain.Message) error {
			got <- string(m.Body)
			return nil
		})
		require.NoError(t, err)
		rctx, stop := context.WithCancel(ctx)
		nd := &node{c: c, stop: stop, done: make(chan error, 1)}
		go func() { nd.done <- wk.Run(rctx) }()
		return nd
	}
	deliver := func(body string) time.Time {
		for {
			select {
			case b := <-got:
				if b == body {
					return time.Now()
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("%s not delivered", body)
			}
		}
	}
	measure := func(crash bool) []time.Duration {
		var gaps []time.Duration
		owner := start()
		_, err := w.Queue.Send(ctx, "x", []byte("warm"))
		require.NoError(t, err)
		deliver("warm")
		for i := range rounds {
			standby := start()
			time.Sleep(ttl / 2) // the standby's watch is up; (timing only, nothing to wait for)
			var t0 time.Time
			if crash {
				owner.c.Close()
				t0 = time.Now()
			} else {
				owner.stop()
				require.NoError(t, <-owner.done)
				t0 = time.Now()
			}
			body := fmt.Sprint("m", i, crash)
			_, err := w.Queue.Send(ctx, "x", []byte(body))
			require.NoError(t, err)
			gaps = append(gaps, deliver(body).Sub(t0))
			if crash {
				<-owner.done
			}
			owner.stop()
			owner.c.Close()
			owner = standby
		}
		owner.stop()
		<-owner.done
		owner.c.Close()
		return gaps
	}
	pct := func(d []time.Duration, p float64) time.Duration {
		s := slices.Clone(d)
		slices.Sort(s)
		return s[min(len(s)-1, int(p*float64(len(s))))]
	}
	rel := measure(false)
	t.Logf("release -> next delivery, %d rounds: p50 %v p99 %v max %v", rounds, pct(rel, 0.5), pct(rel, 0.99), pct(rel, 1))
	cr := measure(true)
	t.Logf("crash -> next delivery (ttl %v), %d rounds: p50 %v p99 %v max %v", ttl, rounds, pct(cr, 0.5), pct(cr, 0.99), pct(cr, 1))
}
