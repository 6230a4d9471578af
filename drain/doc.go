// Package drain delivers an id's mailbox to its current owner, in posting
// order, at least once, and removes a message only through a fenced commit.
//
// A drain by (node, epoch) first checks the ownership record (the caller
// must be the live holder, or it gets the ownership package's HeldError,
// FreeError or FencedError and nothing is consumed), then takes the id's
// drain lock (ErrContended when another drain runs), reads the id's
// delivery cursor, and reads the mailbox after it in batches. After each
// batch it writes the cursor with the lease's fence: JetStream stores the
// write only if the ownership record is still at the fence's revision.
// Only then are the committed messages purged from the mailbox. A handler
// error leaves the message for redelivery with backoff; after the world's
// MaxDeliveries the message moves to the id's dead letters.
//
// A drain or holding run with state (WithState, HoldState) also hands the
// handler its id's state (Message.State, StateHandler) and commits the
// writes the handler staged together with the cursor, in one atomic batch
// in which every message carries the fence: a message's effect on its
// id's state is applied exactly once (design 3.12).
//
// drain is delivery only. Reading and repairing mailboxes beside it (stat,
// listing, dead letters, repost, an id's stored state) is package
// mailbox's; fencepostd's purging (committed messages in purge=server
// worlds, unroutable messages) is package purge's. A worker's Sweeper,
// which removes what its holdings committed, is delivery's and stays here.
//
// docs/design.md section 2 gives the safety argument and section 3 the
// mechanisms, docs/wire.md "Mailboxes" the layout.
package drain
