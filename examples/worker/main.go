// Command worker serves every mailbox of a world as one node: it holds a
// node lease, claims ids that have mail, drains them in order, and
// self-fences (exit 3) if its lease is lost. Run several with different
// --node names to share the load; kill one and the others take its ids over
// once its lease lapses. Stopped (SIGINT, SIGTERM), it gives its node lease
// back: its ids are free for another worker at once. What stays in the
// world is the world's: the ids' records, free, with their last epoch
// (epochs never repeat, so only `fencepost reset --yes` of the whole world
// drops them); run it on a world of its own (--world) to remove it all
// afterwards with `fencepost world rm NAME --yes`.
//
//	go run ./examples/worker --node worker-1
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"syscall"
	"time"

	"github.com/oklog/run"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/fencing"
	"github.com/fencepost/fencepost/worker"
)

func main() {
	var (
		worldName = flag.String("world", "default", "world")
		node      = flag.String("node", "", "this node's name (required)")
		ttl       = flag.Duration("ttl", 0, "node lease ttl (default: the world's)")
	)
	flag.Parse()
	if *node == "" {
		fmt.Fprintln(os.Stderr, "worker: --node is required")
		os.Exit(2)
	}
	os.Exit(serve(*worldName, *node, *ttl))
}

func serve(worldName, node string, ttl time.Duration) int {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	url := os.Getenv("NATS_URL")
	if url == "" {
		url = "nats://127.0.0.1:4222"
	}
	c, err := client.Connect(url)
	if err != nil {
		log.Error("connect", "err", err)
		return 1
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	w, err := c.World(ctx, worldName)
	cancel()
	if err != nil {
		log.Error("open world", "err", err)
		return 1
	}
	// The handler gets the fence (node, epoch): pass it on to anything it
	// writes elsewhere, so that a stale owner's writes can be refused there
	// too.
	handle := func(_ context.Context, m drain.Message) error {
		fmt.Printf("node=%s id=%s seq=%d epoch=%d delivery=%d body=%q\n", node, m.ID, m.Seq, m.Fence.Epoch, m.Delivery, m.Body)
		return nil
	}
	wk, err := w.NewWorker(worker.Config{Node: node, TTL: ttl, Log: log}, handle)
	if err != nil {
		log.Error("worker", "err", err)
		return 1
	}

	var g run.Group
	g.Add(run.SignalHandler(context.Background(), os.Interrupt, syscall.SIGTERM))
	wctx, stop := context.WithCancel(context.Background())
	g.Add(func() error { return wk.Run(wctx) }, func(error) { stop() })
	err = g.Run()
	var cause fencing.Cause
	var sig *run.SignalError
	switch {
	case errors.As(err, &cause):
		fmt.Fprintf(os.Stderr, "SELF-FENCE: %s node=%s\n", cause, node)
		return 3
	case errors.As(err, &sig), err == nil:
		return 0
	default:
		log.Error("worker stopped", "err", err)
		return 1
	}
}
