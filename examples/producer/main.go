// Command producer posts messages into mailboxes of a running fencepostd
// (NATS_URL, default nats://127.0.0.1:4222), whether or not anyone owns the
// ids: the mailbox is durable, the next owner drains it. Its messages stay
// in --world (default "default") until a worker drains them; for a run that
// leaves nothing behind, give both a world of their own:
//
//	fencepost world add demo
//	go run ./examples/producer --world demo
//	go run ./examples/worker --world demo --node w1    # Ctrl-C once it delivered them
//	fencepost world rm demo --yes
//
//	go run ./examples/producer --ids order-1,order-2 --count 10
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/queue"
)

func main() {
	var (
		worldName = flag.String("world", "default", "world")
		ids       = flag.String("ids", "order-1,order-2,order-3", "comma-separated ids to post to")
		count     = flag.Int("count", 10, "messages per id")
		from      = flag.String("from", "producer", "sender name")
	)
	flag.Parse()
	url := os.Getenv("NATS_URL")
	if url == "" {
		url = "nats://127.0.0.1:4222"
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.Connect(url)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	w, err := c.World(ctx, *worldName)
	if err != nil {
		log.Fatal(err)
	}
	for i := range *count {
		for _, id := range strings.Split(*ids, ",") {
			body := fmt.Sprintf("message %d for %s", i+1, id)
			// A message id makes a retry after an unknown outcome safe: the
			// stream stores it once inside the dedupe window.
			p, err := w.Queue.Send(ctx, id, []byte(body), queue.WithFrom(*from), queue.WithMsgID(fmt.Sprintf("%s-%s-%d", *from, id, i)))
			if err != nil {
				log.Fatalf("send to %q: %v", id, err)
			}
			fmt.Printf("posted id=%s seq=%d duplicate=%v\n", id, p.Seq, p.Duplicate)
		}
	}
}
