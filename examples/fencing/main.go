// Command fencing shows ownership and fencing against a running fencepostd
// (NATS_URL, default nats://127.0.0.1:4222), or an embedded server with
// --embedded: node-a claims an id, node-b is refused, node-a's lease lapses,
// node-b seizes the id with a new epoch, and node-a's stale fence is refused.
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
	"time"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/server"
	"github.com/fencepost/fencepost/world"
)

func main() {
	embedded := flag.Bool("embedded", false, "start an embedded nats-server in a temporary directory")
	flag.Parse()
	url := os.Getenv("NATS_URL")
	if url == "" {
		url = "nats://127.0.0.1:4222"
	}
	if *embedded {
		dir, err := os.MkdirTemp("", "fencepost-example")
		if err != nil {
			log.Fatal(err)
		}
		defer os.RemoveAll(dir)
		srv, err := server.Start(server.Config{StoreDir: dir})
		if err != nil {
			log.Fatal(err)
		}
		defer srv.Stop()
		url = srv.ClientURL()
	}
	if err := demo(url); err != nil {
		log.Fatal(err)
	}
}

func demo(url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Connect(url)
	if err != nil {
		return err
	}
	defer c.Close()
	w, err := c.CreateWorld(ctx, "example-fencing", world.Config{})
	if err != nil {
		return err
	}
	defer c.RemoveWorld(context.Background(), w.Name)
	id := fmt.Sprintf("order-%d", time.Now().UnixNano())

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
	fmt.Printf("node-a guard with epoch %d: %v\n", a.Epoch, err)
	return nil
}
