package jsapi

import "github.com/nats-io/nats.go"

// Watched reports whether a goroutine follows nc's drops (nextDrop).
func Watched(nc *nats.Conn) bool {
	_, ok := drops.Load(nc)
	return ok
}
