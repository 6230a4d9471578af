package drain_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/queue"
)

// Post into a mailbox, claim the id, and drain it: the handler gets each
// message with the fence it passes on to its own writes.
func Example() {
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
	if _, err := w.Queue.Send(ctx, "order-42", []byte("paid"), queue.WithFrom("billing"), queue.WithMsgID("pay-42")); err != nil {
		log.Fatal(err) // errors.Is(err, queue.ErrFull), queue.ErrTooLarge, queue.ErrUnknown
	}
	lease, err := w.Ownership.Claim(ctx, "order-42", "node-a", 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	res, err := w.Drainer.DrainLease(ctx, lease, func(ctx context.Context, m drain.Message) error {
		fmt.Printf("%d from %s: %s (delivery %d, epoch %d)\n", m.Seq, m.From, m.Body, m.Delivery, m.Fence.Epoch)
		return nil // acknowledge; an error redelivers, MaxDeliveries dead-letters
	})
	if err != nil {
		log.Fatal(err) // ownership.ErrHeld, ErrFree, ErrFenced; drain.ErrContended, drain.ErrUnknown
	}
	fmt.Println("done", res.Count)
}
