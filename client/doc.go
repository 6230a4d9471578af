// Package client ties fencepost to a NATS connection: connect, then open a
// world and use its ownership store (and, as they land, its mailboxes).
//
//	c, err := client.Connect("nats://127.0.0.1:4222")
//	w, err := c.World(ctx, "default")
//	lease, err := w.Ownership.Claim(ctx, "order-42", "node-a", 0)
package client
