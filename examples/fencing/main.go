// Command fencing shows ownership and fencing against a running fencepostd
// (NATS_URL, default nats://127.0.0.1:4222), or an embedded server with
// --embedded: node-a claims an id, node-b is refused, node-a's lease lapses,
// node-b seizes the id with a new epoch, and node-a's stale fence is refused.
// It works in a world of its own, example-fencing, which it removes when it
// ends, also after a failure or Ctrl-C; with --embedded, the server's store
// is a temporary directory, removed too.
//
//	go run ./examples/fencing --embedded
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/server"
	"github.com/fencepost/fencepost/world"
)

// worldName is the example's own world.
const worldName = "example-fencing"

func main() {
	embedded := flag.Bool("embedded", false, "start an embedded nats-server in a temporary directory")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *embedded); err != nil {
		stop()
		log.Fatal(err) // after run's deferred cleanup
	}
}

func run(ctx context.Context, embedded bool) error {
	url := os.Getenv("NATS_URL")
	if url == "" {
		url = "nats://127.0.0.1:4222"
	}
	if embedded {
		dir, err := os.MkdirTemp("", "fencepost-example")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		srv, err := server.Start(server.Config{StoreDir: dir})
		if err != nil {
			return err
		}
		defer srv.Stop()
		url = srv.ClientURL()
	}
	c, err := client.Connect(url)
	if err != nil {
		return err
	}
	defer c.Close()
	err = demo(ctx, c)
	rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if rerr := c.RemoveWorld(rctx, worldName); rerr != nil && !errors.Is(rerr, world.ErrUnknownWorld) && err == nil {
		err = fmt.Errorf("remove the example's world %s: %w", worldName, rerr)
	}
	if err == nil {
		fmt.Printf("world %s removed\n", worldName)
	}
	return err
}

func demo(ctx context.Context, c *client.Client) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// A world left by a run that was killed before it removed it: start
	// afresh.
	if err := c.RemoveWorld(ctx, worldName); err != nil && !errors.Is(err, world.ErrUnknownWorld) {
		return err
	}
	w, err := c.CreateWorld(ctx, worldName, world.Config{})
	if err != nil {
		return err
	}
	id := "order-42"

	a, err := w.Ownership.Claim(ctx, id, "node-a", time.Second)
	if err != nil {
		return err
	}
	fmt.Printf("node-a claimed %s: epoch=%d until %s\n", id, a.Epoch, a.Expires.Format(time.RFC3339Nano))

	_, err = w.Ownership.Claim(ctx, id, "node-b", 0)
	var held *ownership.HeldError
	if !errors.As(err, &held) {
		return fmt.Errorf("node-b's claim: want held-by, got %v", err)
	}
	fmt.Printf("node-b claim: held-by node=%s epoch=%d\n", held.Node, held.Epoch)

	fmt.Println("node-a stops renewing; waiting for its lease to lapse ...")
	for {
		st, err := w.Ownership.Owner(ctx, id)
		if err != nil {
			return err
		}
		if !st.Held {
			break
		}
		time.Sleep(time.Until(st.Expires))
	}
	b, err := w.Ownership.Seize(ctx, id, "node-b", 0, false)
	if err != nil {
		return err
	}
	fmt.Printf("node-b seized: epoch=%d\n", b.Epoch)

	_, err = w.Ownership.Guard(ctx, id, "node-a", a.Epoch)
	var fenced *ownership.FencedError
	if !errors.As(err, &fenced) {
		return fmt.Errorf("node-a's guard: want fenced, got %v", err)
	}
	fmt.Printf("node-a guard with epoch %d: %v\n", a.Epoch, err)
	return nil
}
