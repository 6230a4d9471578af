package worker_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/worker"
	"github.com/fencepost/fencepost/world"
)

// lines is a log that keeps every line.
type lines struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lines) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), s)
}

// TestWorker_ShardHint: a worker of every id of a per-id world that comes
// to hold 1,000 ids says once, in its log, that a sharded world would serve
// it faster; a worker of fewer ids says nothing of it.
func TestWorker_ShardHint(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{})
	ctx := testutil.Ctx(t, 2*time.Minute)
	log := &lines{}
	wk, err := w.NewWorker(worker.Config{Node: "n1", TTL: 10 * time.Second, Idle: time.Hour, Log: slog.New(slog.NewTextHandler(log, nil))},
		func(context.Context, drain.Message) error { return nil })
	require.NoError(t, err)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- wk.Run(rctx) }()
	defer func() { stop(); require.NoError(t, <-done) }()
	send := func(from, to int) {
		for i := from; i < to; i++ {
			_, err := w.Send(ctx, fmt.Sprint("id-", i), []byte("x"))
			require.NoError(t, err)
		}
	}
	send(0, 999)
	testutil.WaitFor(t, time.Minute, "999 ids held", func() bool { return len(wk.Held()) >= 999 })
	require.Zero(t, log.count("event=shard_hint"), "no hint below 1,000 ids")
	send(999, 1100)
	testutil.WaitFor(t, time.Minute, "the hint", func() bool { return log.count("event=shard_hint") > 0 })
	testutil.WaitFor(t, time.Minute, "1,100 ids held", func() bool { return len(wk.Held()) >= 1100 })
	require.Equal(t, 1, log.count("event=shard_hint"), "said once")
}
