package mailbox

import (
	"context"
	"sync"
	"time"

	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/store"
	"github.com/fencepost/fencepost/internal/wire"
)

// split is what one id's mailbox stores, split at the id's cursor.
type split struct {
	// waiting: the messages after the cursor, not yet delivered and
	// committed (an id's depth).
	waiting uint64
	// committed: the messages at or below the cursor, committed and not
	// yet purged (a drain or fencepostd's purger removes them; until then
	// they take room, never a delivery).
	committed uint64
}

// splitWidth is how many mailboxes splitAtCursors reads at once.
const splitWidth = 16

// splitAtCursors splits the stored count of each id's mailbox (stored,
// read from the stream's subject counts) at the id's cursor: the depth of
// a mailbox counts from its cursor, like Stat's, never the committed
// messages whose purge has not run yet (a worker that stops cleanly can
// leave every id's last batch so).
//
// The cursors are read in multi-last direct gets of the bucket, a
// thousand ids each; then each id with a cursor has one direct get of its
// mailbox from the cursor on, which counts what follows (jsapi.Batch
// Pending): splitWidth at a time. An id without a cursor needs no read.
// A cursor that does not decode counts every stored message as waiting
// (Stat says why). The reads come after the counts: a message posted
// between them counts as waiting, and the committed count is then less by
// as many (never below 0).
func (a *Admin) splitAtCursors(ctx context.Context, stored map[string]uint64) (map[string]split, error) {
	out := make(map[string]split, len(stored))
	ids := make([]string, 0, len(stored))
	for id, n := range stored {
		out[id] = split{waiting: n}
		if n > 0 {
			ids = append(ids, id)
		}
	}
	cursors, err := a.cursors(ctx, ids)
	if err != nil {
		return nil, err
	}
	var (
		mu    sync.Mutex
		first error
		todo  = make([]string, 0, len(cursors))
	)
	for id := range cursors {
		todo = append(todo, id)
	}
	store.Parallel(splitWidth, len(todo), func(i int) {
		id := todo[i]
		waiting, err := a.waitingAfter(ctx, id, cursors[id])
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			first = cmpErr(first, err)
			return
		}
		n := stored[id]
		out[id] = split{waiting: waiting, committed: n - min(n, waiting)}
	})
	return out, first
}

// frontWalk bounds the walk of oldestCommitted: the messages it reads
// from the front of the world's mailboxes, frontBatch a read.
const (
	frontWalk  = 1024
	frontBatch = 256
)

// oldestCommitted is the posting time of the oldest committed message
// still stored (WorldStat.CommittedOldest): the first of the world's
// stored mailbox messages, in stream order, at or below its id's
// committed point. It walks at most frontWalk messages from the front of
// the stream, frontBatch a read, and reads the cursors of a batch's ids
// after the batch: a cursor only moves on, so a message it covers was
// committed and stored when it was read, whatever a purge did since. The
// zero time when none of those messages is committed (then what is
// committed and stored is younger than all of them).
func (a *Admin) oldestCommitted(ctx context.Context) (time.Time, error) {
	filter := wire.MailboxFilter(a.world)
	if a.cfg.Shards > 0 {
		filter = wire.ShardedMailboxFilter(a.world)
	}
	var seq uint64 = 1
	for read := 0; read < frontWalk; {
		b, err := jsapi.DirectGet(ctx, a.nc, wire.MailboxStream(a.world), jsapi.GetRequest{Seq: seq, NextFor: filter, Batch: frontBatch})
		if err != nil || len(b.Msgs) == 0 {
			return time.Time{}, err
		}
		idOf := make([]string, len(b.Msgs))
		var ids []string
		seen := map[string]bool{}
		for i, m := range b.Msgs {
			if tok, ok := a.mailboxToken(m.Subject); ok {
				if id, err := wire.DecodeID(tok); err == nil {
					idOf[i] = id
					if !seen[id] {
						seen[id] = true
						ids = append(ids, id)
					}
				}
			}
		}
		cursors, err := a.cursors(ctx, ids)
		if err != nil {
			return time.Time{}, err
		}
		for i, m := range b.Msgs {
			if idOf[i] != "" && m.Sequence <= cursors[idOf[i]] {
				return m.Time, nil
			}
		}
		read += len(b.Msgs)
		seq = b.Msgs[len(b.Msgs)-1].Sequence + 1
		if b.Pending == 0 {
			break
		}
	}
	return time.Time{}, nil
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// cursors reads the cursor seq of each of ids that has one (above 0): in
// a sharded world, the id's committed point in its shard's cursor
// (shardFloors).
func (a *Admin) cursors(ctx context.Context, ids []string) (map[string]uint64, error) {
	if a.cfg.Shards > 0 {
		return a.shardFloors(ctx, ids)
	}
	out := map[string]uint64{}
	bySubj := make(map[string]string, min(len(ids), jsapi.MaxMultiLast))
	for len(ids) > 0 {
		n := min(len(ids), jsapi.MaxMultiLast)
		subjects := make([]string, n)
		clear(bySubj)
		for i, id := range ids[:n] {
			subjects[i] = wire.KeySubject(a.world, wire.CursorKey(id))
			bySubj[subjects[i]] = id
		}
		ids = ids[n:]
		b, err := jsapi.DirectGet(ctx, a.nc, wire.BucketStream(a.world), jsapi.GetRequest{MultiLast: subjects})
		if err != nil {
			return nil, err
		}
		for _, m := range b.Msgs {
			id, ok := bySubj[m.Subject]
			if !ok {
				continue
			}
			if c, _, err := store.CursorOf(id, m); err == nil && c.Seq > 0 {
				out[id] = c.Seq
			}
		}
	}
	return out, nil
}

// waitingAfter counts the messages of id's mailbox after sequence cursor
// (on the subject they are stored under: storedSubject).
func (a *Admin) waitingAfter(ctx context.Context, id string, cursor uint64) (uint64, error) {
	b, err := jsapi.DirectGet(ctx, a.nc, wire.MailboxStream(a.world), jsapi.GetRequest{Seq: cursor + 1, NextFor: a.storedSubject(id), Batch: 1})
	if err != nil || len(b.Msgs) == 0 {
		return 0, err
	}
	return b.Pending + 1, nil
}
