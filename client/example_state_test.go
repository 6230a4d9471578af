package client_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/server"
	"github.com/fencepost/fencepost/world"
)

// A state worker keeps a balance per account. Each message's handler reads
// the account's state as of the message before it and stages its writes;
// they are committed with the message in one atomic batch fenced on the
// worker's holding. A crash, a pause or a takeover cannot apply a deposit
// twice or lose one: the batch is stored whole, and the message is never
// delivered again, or not at all, and the next holder handles the message
// from the state before it.
func ExampleWorld_NewStateWorker() {
	dir, _ := os.MkdirTemp("", "fencepost-example")
	defer os.RemoveAll(dir)
	srv, err := server.Start(server.Config{StoreDir: dir})
	if err != nil {
		panic(err)
	}
	defer srv.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := client.Connect(srv.ClientURL())
	if err != nil {
		panic(err)
	}
	defer c.Close()
	w, err := c.CreateWorld(ctx, "bank", world.Config{})
	if err != nil {
		panic(err)
	}

	wk, err := w.NewStateWorker(client.WorkerConfig{Node: "node-a"}, func(ctx context.Context, m client.Message, st *client.State) error {
		amount, err := strconv.Atoi(string(m.Body))
		if err != nil {
			return err // not applied; redelivered, then dead-lettered
		}
		balance := 0
		if v, ok := st.Get("balance"); ok {
			balance, _ = strconv.Atoi(string(v))
		}
		return st.Put("balance", []byte(strconv.Itoa(balance+amount)))
	})
	if err != nil {
		panic(err)
	}
	done := make(chan error, 1)
	go func() { done <- wk.Run(ctx) }()

	for _, amount := range []string{"100", "-30", "5"} {
		if _, err := w.Send(ctx, "acct-1", []byte(amount)); err != nil {
			panic(err)
		}
	}
	for { // wait until the three deposits are committed (example only)
		st, err := w.Mailboxes.ReadState(ctx, "acct-1")
		if err != nil {
			panic(err)
		}
		if v := string(st.Values["balance"]); v == "75" {
			fmt.Println("acct-1 balance", v)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	// Output:
	// acct-1 balance 75
}
