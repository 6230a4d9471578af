package shard

import (
	"context"
	"testing"
	"time"
)

// spawn runs a call even when every caller is counted and the run has
// ended: callers leave at the run's end instead of taking a call, so a
// spawn that waited for one then would hold its holder's loop for ever.
func TestSpawn_AfterTheRunEnded(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	wk := &Worker{cfg: Config{Parallel: 1}, calls: make(chan func()), rctx: ctx}
	wk.callers.Store(1) // a caller that is leaving: counted, not receiving
	ran := make(chan struct{})
	spawned := make(chan struct{})
	go func() {
		wk.spawn(func() { close(ran) })
		close(spawned)
	}()
	for _, c := range []chan struct{}{spawned, ran} {
		select {
		case <-c:
		case <-time.After(10 * time.Second):
			t.Fatal("spawn waited for a caller after the run ended")
		}
	}
}
