// Package mailbox administers the mailboxes of one world: what an
// operator or a program reads and repairs beside delivery. Admin reads an
// id's mailbox (Stat) and the world's totals (WorldStat, MailTotals), each
// mailbox's depth counted from its cursor; lists the ids (List); lists,
// reposts and purges dead letters (DeadLetters, Unroutable, Repost,
// PurgeDeadLetters, PurgeUnroutable), moves a stuck message to them
// (Skip); and reads and deletes an id's state (ReadState, DeleteState).
//
// Delivery is package drain's, and the server's purging (committed
// messages, unroutable messages) package purge's; the three share only the
// stored layout (internal/wire) and its reads and writes (internal/store:
// the cursor read, the state read and fenced batch, the dead-letter
// write). docs/design.md section 0 is the map; docs/wire.md "Mailboxes"
// and "Dead letters" the layout.
package mailbox
