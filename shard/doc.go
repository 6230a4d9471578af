// Package shard is the delivery engine of a sharded world (world.Config.
// Shards; docs/contract.md, "Sharded worlds"; docs/design.md, "Shards").
//
// In a sharded world the unit of ownership is the shard: one ownership
// record, epoch and lease per shard, held through the node's session. A
// Worker claims the shards whose first choice it is among the live nodes
// and hands a shard over when another live node becomes its first choice
// (assign.go). Each held shard has one holder (holder.go): an ordered
// consumer reads the shard's stored mail in stream order, the holder hands
// each id's first message to the handler (ids of the shard in parallel, an
// id's messages in order), and commits the shard's cursor, one fenced
// write for the progress of every id of the shard (commit.go). The book
// (book.go) is the holder's account of what it read and did not commit,
// and the one place the rule for a safe cursor lives. A failing id is
// pending: its retries, backoff, delivery count and dead letter are its
// own, and the cursor excepts its mail, so the shard's other ids move on.
// Committed mail leaves the stream in bulk: one purge of the shard below
// the last accepted cursor (commit.go says who removes what, and why it is
// safe).
package shard
