package client_test

import (
	"context"
	"fmt"
	"log"

	"github.com/fencepost/fencepost/client"
)

// A producer's whole program: one fencepost import. The message is stored
// in order-42's mailbox whether or not anyone owns order-42; the key makes
// a retry inside the world's dedupe window answer "duplicate" instead of
// storing a second copy.
func ExampleWorld_Send() {
	ctx := context.Background()
	c, err := client.Connect("nats://127.0.0.1:4222")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	w, err := c.World(ctx, "default")
	if err != nil {
		log.Fatal(err)
	}
	p, err := w.Send(ctx, "order-42", []byte("pay 10 EUR"), client.WithFrom("shop"), client.WithMsgID("pay-42"))
	if err != nil {
		log.Fatal(err) // full, too large, or unknown: see queue.Queue.Send
	}
	fmt.Println("posted seq", p.Seq, "duplicate", p.Duplicate)
}

// A worker's whole program: one fencepost import. It holds every id of the
// world that has mail (under one node lease), drains each in order, and
// hands each message to the handler; a handler error redelivers the
// message with backoff, up to the world's max_deliveries, then
// dead-letters it. m.Fence carries the holding for writes of your own.
func ExampleWorld_NewWorker() {
	ctx := context.Background()
	c, err := client.Connect("nats://127.0.0.1:4222")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	w, err := c.World(ctx, "default")
	if err != nil {
		log.Fatal(err)
	}
	wk, err := w.NewWorker(client.WorkerConfig{Node: "node-a"}, func(ctx context.Context, m client.Message) error {
		fmt.Printf("%s #%d from %s: %s (epoch %d)\n", m.ID, m.Seq, m.From, m.Body, m.Fence.Epoch)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := wk.Run(ctx); err != nil { // until ctx ends, or a self-fence
		log.Fatal(err)
	}
}
