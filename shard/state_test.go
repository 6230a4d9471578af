package shard_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/worker"
	"github.com/fencepost/fencepost/world"
)

// TestShards_StateExactlyOnce: per-id state on a sharded world, through
// crashes. Workers that count each id's messages in its state (testutil.
// Counter) are crashed one after another while mail arrives (what they
// handled after their last commit, state writes included, is lost); the
// next takes over. At the end every id's count is exactly the number of
// messages posted to it and its "seen" holds each body once, in posting
// order, although some messages were handled more than once.
func TestShards_StateExactlyOnce(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{Shards: 4})
	ctx := testutil.Ctx(t, 2*time.Minute)
	counter := &testutil.Counter{}
	const ids, per = 20, 30
	start := func(node string) (*worker.Worker, chan error) {
		wk, err := w.NewStateWorker(worker.Config{Node: node, TTL: 500 * time.Millisecond, Log: testLog()}, counter.Handle)
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() { done <- wk.Run(ctx) }()
		return wk, done
	}
	wk, done := start("n0")
	for r := range per {
		for i := range ids {
			_, err := w.Send(ctx, fmt.Sprint("id-", i), []byte(fmt.Sprintf("%02d,", r)))
			require.NoError(t, err)
		}
		if r%10 == 9 {
			wk.Shards().Crash()
			require.NoError(t, <-done)
			wk, done = start(fmt.Sprint("n", r))
		}
	}
	defer func() { wk.Shards().Crash(); <-done }()
	want := ""
	for r := range per {
		want += fmt.Sprintf("%02d,", r)
	}
	testutil.WaitFor(t, time.Minute, "every id's state complete", func() bool {
		for i := range ids {
			if testutil.StoredState(t, w, fmt.Sprint("id-", i))["seen"] != want {
				return false
			}
		}
		return true
	})
	for i := range ids {
		st := testutil.StoredState(t, w, fmt.Sprint("id-", i))
		require.Equal(t, strconv.Itoa(per), st["count"], "id-%d: each message counted once", i)
		require.Equal(t, want, st["seen"], "id-%d", i)
	}
	t.Logf("%d handler calls for %d messages", len(counter.Bodies()), ids*per)
}
