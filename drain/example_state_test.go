package drain_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/server"
	"github.com/fencepost/fencepost/world"
)

// A state handler counts an id's messages in the id's state. Its writes
// are committed with the cursor in one batch fenced on the lease: a second
// drain reads the state as the first one left it.
func ExampleStateHandler() {
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
	w, err := c.CreateWorld(ctx, "counts", world.Config{})
	if err != nil {
		panic(err)
	}
	count := drain.StateHandler(func(ctx context.Context, m drain.Message, st *drain.State) error {
		n := 0
		if v, ok := st.Get("count"); ok {
			n, _ = strconv.Atoi(string(v))
		}
		if err := st.Put("count", []byte(strconv.Itoa(n+1))); err != nil {
			return err // drain.ErrInvalidState: a bad key or size, nothing staged
		}
		return st.Put("last", m.Body)
	})
	for _, batch := range [][]string{{"a", "b"}, {"c"}} {
		for _, body := range batch {
			if _, err := w.Send(ctx, "x", []byte(body)); err != nil {
				panic(err)
			}
		}
		lease, err := w.Ownership.Claim(ctx, "x", "node-a", 30*time.Second)
		if err != nil {
			panic(err)
		}
		if _, err := w.Drainer.DrainLease(ctx, lease, count.Handler(), drain.WithState()); err != nil {
			panic(err)
		}
		if err := w.Ownership.Release(ctx, "x", "node-a"); err != nil {
			panic(err)
		}
		st, err := w.Mailboxes.ReadState(ctx, "x")
		if err != nil {
			panic(err)
		}
		fmt.Printf("count=%s last=%s\n", st.Values["count"], st.Values["last"])
	}
	// Output:
	// count=2 last=b
	// count=3 last=c
}
