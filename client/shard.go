package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/ownership"
)

// Unit is what an ownership operation on an id acts on (docs/contract.md,
// "Sharded worlds"). In a per-id world it is the id itself. In a sharded
// world an id's ownership record is its shard's record: claim, owner,
// guard, renew, release and seize of the id act on its shard, whose
// record, cursor and lock are kept under the shard's unit name
// (wire.ShardUnit), so that every id of a shard shares one holder, epoch
// and lease.
//
// Name is what World.Ownership's operations take in place of the id:
//
//	u, err := w.Unit("order-42")
//	lease, err := w.Ownership.Claim(ctx, u.Name, "node-a", 0) // the shard's claim in a sharded world
type Unit struct {
	// Name is the key of the unit's ownership record: the id in a per-id
	// world, "shard/<Shard>" in a sharded one.
	Name string
	// Shard is the shard in a sharded world (0 to Shards-1), and -1 in a
	// per-id world.
	Shard int
}

// Sharded says whether the unit is a shard of a sharded world.
func (u Unit) Sharded() bool { return u.Shard >= 0 }

// ErrPerIDWorld is returned when a shard is named in a per-id world.
var ErrPerIDWorld = errors.New("client: a per-id world has no shards")

// Shards is the number of shards of a sharded world, 0 for a per-id world.
func (w *World) Shards() int { return w.Config.Shards }

// Unit is the unit an ownership operation on id acts on: the id in a
// per-id world, its shard (wire.ShardOf) in a sharded world. An id that is
// not one (empty, too long, not UTF-8) is refused with wire.ErrInvalidID
// in either kind of world.
func (w *World) Unit(id string) (Unit, error) {
	if err := wire.ValidateID(id); err != nil {
		return Unit{}, err
	}
	n := w.Config.Shards
	if n == 0 {
		return Unit{Name: id, Shard: -1}, nil
	}
	q := wire.ShardOf(id, n)
	return Unit{Name: wire.ShardUnit(q), Shard: q}, nil
}

// ShardUnit is the unit of shard q, named directly. It refuses a per-id
// world (ErrPerIDWorld) and a shard outside 0..Shards-1
// (wire.ErrInvalidID).
func (w *World) ShardUnit(q int) (Unit, error) {
	n := w.Config.Shards
	if n == 0 {
		return Unit{}, fmt.Errorf("%w: world %q is a per-id world (created without shards): name the id instead", ErrPerIDWorld, w.Name)
	}
	if err := wire.ValidateShard(q, n); err != nil {
		return Unit{}, fmt.Errorf("%w (world %q has %d shards)", err, w.Name, n)
	}
	return Unit{Name: wire.ShardUnit(q), Shard: q}, nil
}

// ShardListOptions selects the shards ListShards returns.
type ShardListOptions struct {
	HeldBy string // only shards whose live record names this node
	From   int    // the first shard listed: 0 from the start, Next-page's From = the last listed + 1
	Limit  int    // at most this many shards; 1 or more
}

// ShardEntry is one shard of a listing.
type ShardEntry struct {
	Shard int
	// Owner is the shard's ownership: Held with the holder, epoch and
	// expiry, or not held with the last epoch (0: never owned). Its ID is
	// the shard's unit name.
	Owner ownership.Status
	// Err is set when the shard's record does not decode; Owner then
	// holds only ID and Revision.
	Err error
}

// ShardPage is one page of a shard listing, in shard order.
type ShardPage struct {
	Entries []ShardEntry
	// More says that the listing was cut at the limit: list on From the
	// last entry's shard + 1.
	More bool
}

// ListShards lists the shards of a sharded world in order, each with its
// holder or last epoch (ErrPerIDWorld for a per-id world). It reads every
// record of the world once (a sharded world has one per shard that was
// ever owned); a shard without a record is listed free at epoch 0. Like
// ownership.Store.ScanRecords it is a listing, not a decision: use Owner
// of the shard's unit, or the write that decides.
func (w *World) ListShards(ctx context.Context, o ShardListOptions) (ShardPage, error) {
	var page ShardPage
	n := w.Config.Shards
	switch {
	case n == 0:
		return page, fmt.Errorf("%w: world %q is a per-id world (created without shards)", ErrPerIDWorld, w.Name)
	case o.Limit < 1:
		return page, fmt.Errorf("client: list limit %d: list at least 1 shard", o.Limit)
	case o.From < 0 || o.From > n:
		return page, fmt.Errorf("%w: shard %d is outside 0..%d", wire.ErrInvalidID, o.From, n-1)
	}
	if o.HeldBy != "" {
		if err := wire.ValidateNode(o.HeldBy); err != nil {
			return page, err
		}
	}
	recs := make(map[int]ownership.Listed)
	if _, err := w.Ownership.ScanRecords(ctx, func(l ownership.Listed) error {
		if q, ok := wire.UnitShard(l.ID, n); ok {
			recs[q] = l
		}
		return nil
	}); err != nil {
		return page, err
	}
	for q := o.From; q < n; q++ {
		e := ShardEntry{Shard: q, Owner: ownership.Status{ID: wire.ShardUnit(q)}}
		if l, ok := recs[q]; ok {
			e.Owner, e.Err = l.Status, l.Err
		}
		if o.HeldBy != "" && (e.Err != nil || !e.Owner.Held || e.Owner.Node != o.HeldBy) {
			continue
		}
		if len(page.Entries) == o.Limit {
			page.More = true
			break
		}
		page.Entries = append(page.Entries, e)
	}
	return page, nil
}
