// Package queue posts messages into mailboxes: Send stores a message on the
// subject of an id's mailbox in the world's mailbox stream and returns its
// stream sequence once JetStream acknowledged it. Posting needs no owner:
// the next owner of the id drains it (package drain).
//
// A message is a plain JetStream message with a few headers (see
// docs/wire.md "Posting"), so that any NATS client can post with one
// publish.
package queue
