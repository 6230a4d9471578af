// Package world creates, opens, lists, resets and removes worlds. A world is
// a namespace: one KV bucket (ownership records, cursors, locks, node
// leases) and one mailbox stream, with its settings stored in the bucket
// stream's metadata so that they survive a reset.
package world
