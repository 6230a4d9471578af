// Package client is the one import a program needs for the common paths:
// connect, open a world, post into mailboxes (World.Send) and serve them
// with a worker (World.NewWorker). The world's stores are there for
// everything else: World.Ownership (claims, leases, fences), World.Queue
// (sends), World.Drainer (drains), World.Mailboxes (stat, listing, dead
// letters, repost, per-id state).
//
//	c, err := client.Connect("nats://127.0.0.1:4222")
//	w, err := c.World(ctx, "default")
//	p, err := w.Send(ctx, "order-42", body, client.WithMsgID("k1"))
//	wk, err := w.NewWorker(client.WorkerConfig{Node: "n1"}, handler)
//
// A handler that keeps state per id gets it from the world and commits its
// writes with the message, exactly once (World.NewStateWorker, State;
// docs/design.md 3.12):
//
//	wk, err := w.NewStateWorker(client.WorkerConfig{Node: "n1"}, func(ctx context.Context, m client.Message, st *client.State) error {
//		v, _ := st.Get("count")
//		return st.Put("count", next(v))
//	})
package client
