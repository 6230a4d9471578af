package jsapi

import "github.com/nats-io/nats.go"

// Watched reports whether a goroutine follows nc's drops (nextDrop).
func Watched(nc *nats.Conn) bool {
	_, ok := drops.Load(nc)
	return ok
}

// PurgeRequest is Purge's request body, for the test that compares it
// with encoding/json's.
var PurgeRequest = purgeRequest

// Purged is how the server's answer to a purge that succeeded begins.
const Purged = purged
