// Package purge is fencepostd's purging of a world's mailboxes, apart from
// delivery: PurgeCommitted removes what the stored cursors cover in a
// world whose owners may not purge (purge=server, docs/security.md), and
// FollowUnroutable (or a one-off SweepUnroutable) moves every message
// stored on a mailbox subject that no id encodes to aside, to the world's
// unroutable dead letters (docs/design.md 3.6a).
//
// Neither takes a lease or writes an ownership record: a cursor is judged
// as stored (design 3.4: only what a stored cursor covers is removed), and
// an unroutable message belongs to no id. Delivery is package drain's
// (whose holdings and worker sweeps purge what their own commits cover),
// the administration of dead letters package mailbox's; the three share
// the layout (internal/wire) and the dead-letter write (internal/store).
package purge
