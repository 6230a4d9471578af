package worker

import (
	"context"

	"github.com/nats-io/nats.go"

	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/store"
	"github.com/fencepost/fencepost/internal/wire"
)

// uncommitted keeps, of ids (each listed by a scan with messages stored),
// those that may have a message no stored cursor covers, in their order.
// A partitioned world's holdings purge their committed messages a while
// after each commit (drain.purgeDelay), so a scan lists ids whose every
// stored message is committed; each would become a claim (not held here)
// or a drain (held) that finds nothing to deliver (design 3.15, "What
// would make it pay"). Per MaxMultiLast ids, two requests tell them
// apart: a multi-last direct get of their mailbox subjects (each one's
// last stored message), then one of their cursors. An id whose cursor is
// at or after its last message has nothing uncommitted; one with no
// message left has nothing at all.
//
// This is liveness only: a claim or a drain of an id with mail would find
// what the reads found, and an id dropped here gets its next post as a
// candidate like any other id. The cursor is read after the last message,
// and cursors only move forward, so a message stored after the first
// read is not taken for covered. Anything unsure keeps the id: a failed
// read, an answer cut by its size, a replicated world (any replica may
// answer a direct get, and one that lags could miss the newest message).
// An id absent from a non-empty answer has no message stored.
func (wk *Worker) uncommitted(ctx context.Context, ids []string) []string {
	if wk.w.Config.Replicas != 1 || len(ids) == 0 {
		return ids
	}
	nc := handles.Of(wk.w).JS.Conn()
	kept := ids[:0:0]
	for len(ids) > 0 {
		n := min(len(ids), jsapi.MaxMultiLast)
		kept = append(kept, wk.uncommittedOf(ctx, nc, ids[:n])...)
		ids = ids[n:]
	}
	return kept
}

// scanReadBytes bounds the answer to one read of last messages (bodies
// included): 1,000 mailboxes whose last post is large would otherwise
// come as up to the server's max_pending (64 MB) at once. A cut answer
// keeps every id of its read.
var scanReadBytes = 1 << 20

// uncommittedOf is uncommitted for at most MaxMultiLast ids.
func (wk *Worker) uncommittedOf(ctx context.Context, nc *nats.Conn, ids []string) []string {
	subjects := make([]string, len(ids))
	for i, id := range ids {
		subjects[i] = wire.MailboxSubject(wk.w.Name, id)
	}
	b, err := jsapi.DirectGet(ctx, nc, wire.MailboxStream(wk.w.Name), jsapi.GetRequest{MultiLast: subjects, MaxBytes: scanReadBytes})
	if err != nil || b.Pending > 0 || len(b.Msgs) == 0 {
		// Failed, or cut by its size (what was not answered may have
		// mail), or empty: the server answers "not found" both when no
		// subject has a message (every id purged since the scan's
		// listing, which is rare) and when the first message it found
		// failed to load.
		return ids
	}
	last := make(map[string]uint64, len(b.Msgs))
	for _, m := range b.Msgs {
		last[m.Subject] = m.Sequence
	}
	var check []string // ids with a message stored
	for i, id := range ids {
		if last[subjects[i]] != 0 {
			check = append(check, id)
			subjects[len(check)-1] = subjects[i]
		}
	}
	if len(check) == 0 {
		return nil
	}
	stored := subjects[:len(check)]
	cursors := make([]string, len(check))
	for i, id := range check {
		cursors[i] = wire.KeySubject(wk.w.Name, wire.CursorKey(id))
	}
	c, err := jsapi.DirectGet(ctx, nc, wire.BucketStream(wk.w.Name), jsapi.GetRequest{MultiLast: cursors})
	if err != nil {
		return check
	}
	at := make(map[string]uint64, len(c.Msgs)) // a deleted cursor, or one that does not decode: 0
	for _, m := range c.Msgs {
		if cur, _, err := store.CursorOf("", m); err == nil {
			at[m.Subject] = cur.Seq
		}
	}
	keep := check[:0]
	for i, id := range check {
		if at[cursors[i]] < last[stored[i]] {
			keep = append(keep, id)
		}
	}
	return keep
}
