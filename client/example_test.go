package client_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/server"
	"github.com/fencepost/fencepost/world"
)

// An owner claims an id, a second node is refused, the owner's lease lapses,
// the second node seizes the id with a new epoch, and the old owner's fence
// no longer passes the guard.
func Example() {
	dir, _ := os.MkdirTemp("", "fencepost-example")
	defer os.RemoveAll(dir)
	srv, err := server.Start(server.Config{StoreDir: dir})
	if err != nil {
		panic(err)
	}
	defer srv.Stop()

	ctx := context.Background()
	c, err := client.Connect(srv.ClientURL())
	if err != nil {
		panic(err)
	}
	defer c.Close()
	w, err := c.CreateWorld(ctx, "example", world.Config{MinTTL: 10 * time.Millisecond})
	if err != nil {
		panic(err)
	}

	a, _ := w.Ownership.Claim(ctx, "order-42", "node-a", 50*time.Millisecond)
	fmt.Println("node-a claimed epoch", a.Epoch)

	_, err = w.Ownership.Claim(ctx, "order-42", "node-b", time.Minute)
	var held *ownership.HeldError
	if errors.As(err, &held) {
		fmt.Println("node-b: held by", held.Node, "epoch", held.Epoch)
	}

	time.Sleep(time.Until(a.Expires)) // let node-a's lease lapse (example only)
	b, _ := w.Ownership.Seize(ctx, "order-42", "node-b", time.Minute, false)
	fmt.Println("node-b seized epoch", b.Epoch)

	_, err = w.Ownership.Guard(ctx, "order-42", "node-a", a.Epoch)
	fmt.Println("node-a guard fenced:", errors.Is(err, ownership.ErrFenced))
	// Output:
	// node-a claimed epoch 1
	// node-b: held by node-a epoch 1
	// node-b seized epoch 2
	// node-a guard fenced: true
}
