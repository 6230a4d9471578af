package worker

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/store"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/world"
)

// committedMail is an id whose stored messages are all committed: its
// cursor is at or after last, the last message stored on its mailbox.
type committedMail struct {
	id   string
	last uint64
	at   time.Time // when the cursor was stored (the server's clock)
}

// uncommitted sorts ids (each listed by a scan with messages stored):
// keep, those that may have a message no stored cursor covers, in their
// order; committed, those whose every stored message is covered. A
// holding purges its committed messages a while after each commit
// (drain.purgeDelay), so a scan lists ids whose every stored message is
// committed; each would become a claim (not held here) or a drain (held)
// that finds nothing to deliver and purges (docs/design/partitions.md,
// "The scan's filter"). Per MaxMultiLast ids, two requests tell them apart: a
// multi-last direct get of their mailbox subjects (each one's last stored
// message), then one of their cursors. An id whose cursor is at or after
// its last message has nothing uncommitted; one with no message left (an
// id absent from a non-empty answer) has nothing at all, and is in
// neither list.
//
// Keeping an id out of keep is liveness only: a claim or a drain of an id
// with mail would find what the reads found, and an id left out gets its
// next post as a candidate like any other id. The cursor is read after
// the last message, and cursors only move forward, so a message stored
// after the first read is not taken for covered. Anything unsure keeps
// the id: a failed read, an answer cut by its size, an empty answer, a
// replicated world (any replica may answer a direct get, and one that
// lags could miss the newest message).
func (wk *Worker) uncommitted(ctx context.Context, ids []string) (keep []string, committed []committedMail) {
	if wk.w.Config.Replicas != 1 {
		return ids, nil
	}
	nc := handles.Of(wk.w).JS.Conn()
	for len(ids) > 0 {
		n := min(len(ids), jsapi.MaxMultiLast)
		keep, committed = wk.uncommittedOf(ctx, nc, ids[:n], keep, committed)
		ids = ids[n:]
	}
	return keep, committed
}

// scanReadBytes bounds the answer to one read of last messages (bodies
// included): 1,000 mailboxes whose last post is large would otherwise
// come as up to the server's max_pending (64 MB) at once. A cut answer
// keeps every id of its read.
var scanReadBytes = 1 << 20

// uncommittedOf is uncommitted for at most MaxMultiLast ids, appended to
// keep and committed.
func (wk *Worker) uncommittedOf(ctx context.Context, nc *nats.Conn, ids, keep []string, committed []committedMail) ([]string, []committedMail) {
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
		return append(keep, ids...), committed
	}
	last := make(map[string]uint64, len(b.Msgs))
	for _, m := range b.Msgs {
		last[m.Subject] = m.Sequence
	}
	var stored []committedMail // ids with a message stored
	for i, id := range ids {
		if l := last[subjects[i]]; l != 0 {
			stored = append(stored, committedMail{id: id, last: l})
		}
	}
	if len(stored) == 0 {
		return keep, committed
	}
	cursors := make([]string, len(stored))
	for i, s := range stored {
		cursors[i] = wire.KeySubject(wk.w.Name, wire.CursorKey(s.id))
	}
	c, err := jsapi.DirectGet(ctx, nc, wire.BucketStream(wk.w.Name), jsapi.GetRequest{MultiLast: cursors})
	if err != nil {
		for _, s := range stored {
			keep = append(keep, s.id)
		}
		return keep, committed
	}
	at := make(map[string]*jetstream.RawStreamMsg, len(c.Msgs))
	for _, m := range c.Msgs {
		at[m.Subject] = m
	}
	for i, s := range stored {
		m := at[cursors[i]]
		if m == nil {
			keep = append(keep, s.id)
			continue
		}
		// A deleted cursor, or one that does not decode: 0.
		if cur, _, err := store.CursorOf("", m); err != nil || cur.Seq < s.last {
			keep = append(keep, s.id)
			continue
		}
		s.at = m.Time
		committed = append(committed, s)
	}
	return keep, committed
}

// scanPurgeAfter: a scan leaves the committed messages of an id whose
// cursor was stored less than this long ago to its holder, whose own
// purge runs half a second after its commit (or to the sweeps, which run
// every second); a later scan purges what is still there.
var scanPurgeAfter = 5 * time.Second

// purgeCommitted removes the messages of ids the scan found all committed
// (uncommitted) that their holder did not remove: a holding's purge runs
// half a second after its commit, and until 3 Dec a scan's claim or nudge
// of the id drained it and purged; an id whose holder crashed before its
// purge, or whose purge failed, keeps its committed messages until
// someone does (the fault suite's final drain waits for empty mailboxes,
// and caught the filter without this). An id whose cursor is younger
// than scanPurgeAfter is left to its holder. On a world whose server
// purges (PurgeByServer) this does nothing.
//
// Each purge removes the id's messages below last+1, the last one the
// scan read, which the cursor read after it covers: messages that left
// the mailbox through a commit (3.2), as a holding's own purge removes
// them; a message stored after the read is above last and stays.
func (wk *Worker) purgeCommitted(ctx context.Context, committed []committedMail) {
	if wk.w.Config.Purge == world.PurgeByServer {
		return
	}
	nc := handles.Of(wk.w).JS.Conn()
	for _, c := range committed {
		if time.Since(c.at) < scanPurgeAfter {
			continue
		}
		err := jsapi.Purge(ctx, nc, wire.MailboxStream(wk.w.Name), wire.MailboxSubject(wk.w.Name, c.id), c.last+1)
		if err != nil {
			if ctx.Err() == nil {
				wk.log.Warn("purge of committed messages a scan found failed; the next scan retries", "id", c.id, "below", c.last+1, "error", err)
			}
			return
		}
		wk.scanPurges.Add(1)
	}
}
