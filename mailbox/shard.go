package mailbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/store"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/ownership"
)

// The admin reads of a sharded world (world.Config.Shards; docs/contract.md,
// "Sharded worlds"). There an id's posts are stored under its shard
// (wire.ShardMailboxSubject: the stream transforms fp.<w>.mb.<eid> into
// fp.<w>.ms.<shard>.<eid>), its ownership record is its shard's (keyed by
// wire.ShardUnit), and which of its messages are committed is said by its
// shard's cursor (wire.ShardCursor), not by a cursor of its own. These
// helpers give every read of this package one form for both kinds of
// world: in a per-id world each is what the package always read.

// unit is the key of id's ownership record: id itself in a per-id world,
// its shard's unit in a sharded one. An id that is not one is refused in
// both (in a per-id world by the ownership store, as it always was).
func (a *Admin) unit(id string) (string, error) {
	if a.cfg.Shards == 0 {
		return id, nil
	}
	if err := wire.ValidateID(id); err != nil {
		return "", err
	}
	return wire.ShardUnit(wire.ShardOf(id, a.cfg.Shards)), nil
}

// storedSubject is the subject id's posts are stored under: the subject
// they are posted to in a per-id world, its shard's in a sharded one.
func (a *Admin) storedSubject(id string) string {
	if a.cfg.Shards == 0 {
		return wire.MailboxSubject(a.world, id)
	}
	return wire.ShardMailboxSubject(a.world, id, a.cfg.Shards)
}

// mailboxToken is the token of a stored mailbox subject of the world
// (fp.<w>.mb.<token>, or fp.<w>.ms.<shard>.<token> in a sharded world),
// and false for any other subject. As in a per-id world the token may be
// no id's (a post to a subject no id encodes to: unroutable); the
// server's transform stores it under its shard all the same.
func (a *Admin) mailboxToken(subj string) (string, bool) {
	if a.cfg.Shards == 0 {
		return wire.MailboxToken(a.world, subj)
	}
	return wire.ShardedToken(a.world, subj)
}

// isUnroutable says whether subj is a stored mailbox subject of the world
// that no id's delivery reads (its token is no id's).
func (a *Admin) isUnroutable(subj string) bool {
	tok, ok := a.mailboxToken(subj)
	if !ok {
		return false
	}
	_, err := wire.DecodeID(tok)
	return err != nil
}

// idCursor is id's cursor: in a per-id world its own (store.ReadCursor);
// in a sharded world the view of its shard's cursor for the id, as a
// per-id cursor would say it: Seq is the id's committed point (just below
// its first pending message, or the shard's mark), and a pending id's
// first message carries its failures (Head, Failures, Error).
func (a *Admin) idCursor(ctx context.Context, id string) (wire.Cursor, error) {
	if a.cfg.Shards == 0 {
		c, _, err := store.ReadCursor(ctx, a.w, id)
		return c, err
	}
	sc, err := a.readShardCursor(ctx, wire.ShardOf(id, a.cfg.Shards))
	if err != nil {
		return wire.Cursor{}, err
	}
	return shardView(sc, wire.EncodeID(id)), nil
}

// shardView is the cursor of the id with token eid that shard cursor sc
// says (idCursor).
func shardView(sc wire.ShardCursor, eid string) wire.Cursor {
	p, ok := sc.Pending[eid]
	if !ok {
		return wire.Cursor{Seq: sc.Seq}
	}
	c := wire.Cursor{Seq: p.Seq - 1}
	if p.Failures > 0 {
		c.Head, c.Failures, c.Error = p.Seq, p.Failures, p.Error
	}
	return c
}

// readShardCursor reads shard q's cursor through the bucket stream's
// leader (on a single replica, its direct get), as store.ReadCursor reads
// an id's: an absent or deleted one is zero (nothing committed).
func (a *Admin) readShardCursor(ctx context.Context, q int) (wire.ShardCursor, error) {
	subj := wire.KeySubject(a.world, wire.CursorKey(wire.ShardUnit(q)))
	var (
		m   *jetstream.RawStreamMsg
		err error
	)
	if a.cfg.Replicas <= 1 {
		m, err = jsapi.DirectLast(ctx, a.nc, wire.BucketStream(a.world), subj)
	} else {
		m, err = jsapi.LeaderGet(ctx, a.nc, wire.BucketStream(a.world), jsapi.GetRequest{LastFor: subj})
	}
	switch {
	case errors.Is(err, jsapi.ErrNotFound):
		return wire.ShardCursor{}, nil
	case err != nil:
		return wire.ShardCursor{}, err
	case jsapi.IsMarker(m.Header):
		return wire.ShardCursor{}, nil
	}
	c, err := wire.DecodeShardCursor(m.Data)
	if err != nil {
		return wire.ShardCursor{}, fmt.Errorf("cursor of shard %d (key %s): %w; it is left as it is", q, wire.CursorKey(wire.ShardUnit(q)), err)
	}
	return c, nil
}

// shardFloors is, for each of ids that has one above 0, its committed
// point in a sharded world (idCursor's Seq), from one multi-last read of
// their shards' cursors per thousand shards. A shard cursor that does
// not decode gives its ids none: every stored message counts as waiting
// (Stat of the id says why).
func (a *Admin) shardFloors(ctx context.Context, ids []string) (map[string]uint64, error) {
	n := a.cfg.Shards
	byShard := map[int][]string{}
	for _, id := range ids {
		q := wire.ShardOf(id, n)
		byShard[q] = append(byShard[q], id)
	}
	subjects := make([]string, 0, len(byShard))
	shardOf := make(map[string]int, len(byShard))
	for q := range byShard {
		s := wire.KeySubject(a.world, wire.CursorKey(wire.ShardUnit(q)))
		subjects = append(subjects, s)
		shardOf[s] = q
	}
	out := map[string]uint64{}
	for len(subjects) > 0 {
		k := min(len(subjects), jsapi.MaxMultiLast)
		b, err := jsapi.DirectGet(ctx, a.nc, wire.BucketStream(a.world), jsapi.GetRequest{MultiLast: subjects[:k]})
		if err != nil {
			return nil, err
		}
		subjects = subjects[k:]
		for _, m := range b.Msgs {
			q, ok := shardOf[m.Subject]
			if !ok || jsapi.IsMarker(m.Header) {
				continue
			}
			sc, err := wire.DecodeShardCursor(m.Data)
			if err != nil {
				continue
			}
			for _, id := range byShard[q] {
				if c := shardView(sc, wire.EncodeID(id)); c.Seq > 0 {
					out[id] = c.Seq
				}
			}
		}
	}
	return out, nil
}

// shardOwners is the ownership of every shard of a sharded world, read
// in one scan of its records (a sharded world has one per shard ever
// owned and none per id), for a listing of its ids: each id's owner is
// its shard's.
type shardOwners struct {
	n    int
	recs map[int]ownership.Listed
}

// readShardOwners reads the shards' owners of a sharded world, and nil in
// a per-id world.
func (a *Admin) readShardOwners(ctx context.Context) (*shardOwners, error) {
	if a.cfg.Shards == 0 {
		return nil, nil
	}
	s := &shardOwners{n: a.cfg.Shards, recs: map[int]ownership.Listed{}}
	_, err := a.own.ScanRecords(ctx, func(l ownership.Listed) error {
		if q, ok := wire.UnitShard(l.ID, s.n); ok {
			s.recs[q] = l
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// of is id's owner, its shard's record: free at epoch 0 when the shard
// has none; Err when it does not decode.
func (s *shardOwners) of(id string) (ownership.Status, error) {
	q := wire.ShardOf(id, s.n)
	l, ok := s.recs[q]
	if !ok {
		return ownership.Status{ID: wire.ShardUnit(q)}, nil
	}
	return l.Status, l.Err
}
