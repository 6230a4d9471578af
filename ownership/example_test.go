package ownership_test

import (
	"context"
	"fmt"
	"time"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/ownership"
)

// A held lease that renews itself; work runs under the keeper's context, so
// it stops when the lease is lost, and carries the current fence.
func ExampleStore_Keep() {
	ctx := context.Background()
	c, _ := client.Connect("nats://127.0.0.1:4222")
	w, _ := c.World(ctx, "default")
	l, err := w.Ownership.Claim(ctx, "order-42", "node-a", 10*time.Second)
	if err != nil {
		return // held by someone else
	}
	k, _ := w.Ownership.Keep(l)
	defer k.Release(context.Background())
	select {
	case <-k.Done():
		fmt.Println("self-fenced:", k.Cause()) // e.g. lease_record_mismatch_fence
	case <-time.After(time.Minute):
		fmt.Println("done working under", k.Fence())
	}
}

// A node lease backs every id the node claims through it: one renewal per
// ttl/3 for all of them, and all are free at once when it ends or lapses.
func ExampleStore_OpenSession() {
	ctx := context.Background()
	c, _ := client.Connect("nats://127.0.0.1:4222")
	w, _ := c.World(ctx, "default")
	ss, err := w.Ownership.AcquireSession(ctx, "node-a", 0) // waits for a previous process's lease
	if err != nil {
		return
	}
	defer ss.Close() // frees every id at once
	for _, id := range []string{"a", "b", "c"} {
		if l, err := ss.Claim(ctx, id); err == nil {
			fmt.Println("holding", l.ID, "epoch", l.Epoch)
		}
	}
	<-ss.Done() // self-fence: stop everything done under the session
	fmt.Println(ss.Err())
}

// Watch a whole world: a standby reacts to a lapse or a release at once.
func ExampleStore_Watch() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, _ := client.Connect("nats://127.0.0.1:4222")
	w, _ := c.World(ctx, "default")
	events, _ := w.Ownership.Watch(ctx, "")
	for ev := range events {
		if ev.Kind == ownership.EventLapsed || ev.Kind == ownership.EventReleased {
			fmt.Println(ev.ID, "is free; last holder", ev.Node)
		}
	}
}
