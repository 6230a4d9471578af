package mailbox

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/store"
	"github.com/fencepost/fencepost/internal/wire"
)

// IDState is an id's state as stored, with the cursor it was stored with
// (the last message whose effect it holds).
type IDState struct {
	ID     string
	Cursor uint64
	Values map[string][]byte
	// Deleted counts the keys deleted whose delete marker is still in the
	// bucket: they count against wire.MaxStateSubjects until DeleteState.
	Deleted int
}

// Keys returns the state's keys, sorted.
func (s IDState) Keys() []string {
	keys := make([]string, 0, len(s.Values))
	for k := range s.Values {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// ReadState reads id's state as stored: the effect of every message up to
// Cursor, and of none after it. It writes nothing.
func (a *Admin) ReadState(ctx context.Context, id string) (IDState, error) {
	if err := wire.ValidateID(id); err != nil {
		return IDState{}, err
	}
	if a.cfg.Shards > 0 {
		return a.readShardedState(ctx, id)
	}
	c, at, err := store.ReadCursor(ctx, a.w, id)
	if err != nil {
		return IDState{}, err
	}
	st, err := store.LoadState(ctx, a.w, id, at)
	if err != nil {
		return IDState{}, err
	}
	return IDState{ID: id, Cursor: c.Seq, Values: st.Values, Deleted: len(st.Gone)}, nil
}

// DeleteState removes every key of id's state. It claims the id as node
// first (so it is refused with *ownership.HeldError while someone holds
// it, and a holder whose lease lapsed is fenced out by the claim's
// write), deletes every key and writes the cursor again unchanged, in one
// atomic batch fenced on that claim, and releases the id. It returns the
// keys it deleted; none (and no write beyond the claim and release) when
// the state is empty.
func (a *Admin) DeleteState(ctx context.Context, id, node string) ([]string, error) {
	if err := wire.ValidateID(id); err != nil {
		return nil, err
	}
	if !a.w.AllowsState() {
		return nil, fmt.Errorf("mailbox: world %q: %w", a.world, ErrNoState)
	}
	// In a sharded world the claim is of the id's shard (refused while a
	// worker holds it), and the batch rewrites the shard's cursor.
	unit, err := a.unit(id)
	if err != nil {
		return nil, err
	}
	l, err := a.own.Claim(ctx, unit, node, a.cfg.DefaultTTL)
	if err != nil {
		return nil, err
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := a.own.Release(rctx, unit, node); err != nil {
			a.log.Warn("mailbox: release after deleting the state failed; the claim lapses", "world", a.world, "id", id, "node", node, "error", err)
		}
	}()
	cursor, at, err := a.cursorBytes(ctx, id, unit)
	if err != nil {
		return nil, err
	}
	st, err := store.LoadStateWith(ctx, a.w, id, wire.KeySubject(a.world, wire.CursorKey(unit)), at)
	if err != nil {
		return nil, err
	}
	// Each subject is purged below its delete marker afterwards: a marker
	// left behind counts against wire.MaxStateSubjects.
	below := map[string]uint64{}
	for k, seq := range st.Gone {
		below[k] = seq + 1
	}
	var keys []string
	if len(st.Values) > 0 {
		var w []store.StateWrite
		for k := range st.Values {
			w = append(w, store.StateWrite{Key: k})
		}
		slices.SortFunc(w, func(x, y store.StateWrite) int { return strings.Compare(x.Key, y.Key) })
		csubj := wire.KeySubject(a.world, wire.CursorKey(unit))
		ack, err := store.PublishCommit(ctx, a.w, l.Fence, csubj, cursor, w)
		if err != nil {
			return nil, fmt.Errorf("mailbox: delete the state of %q: %w", id, err)
		}
		for _, x := range w {
			keys = append(keys, x.Key)
			below[x.Key] = ack.Sequence // the markers come before the cursor
		}
	}
	for k, seq := range below {
		subj := wire.KeySubject(a.world, wire.StateKey(id, k))
		if err := handles.Of(a.w).Bucket.Purge(ctx, jetstream.WithPurgeSubject(subj), jetstream.WithPurgeSequence(seq)); err != nil {
			a.log.Warn("mailbox: the delete marker of a state key stays (it counts against the id's keys until a delete purges it)", "world", a.world, "id", id, "key", k, "error", err)
		}
	}
	return keys, nil
}

// readShardedState is ReadState in a sharded world: the id's state is
// stored with its shard's cursor, and Cursor is the id's committed point
// in it.
func (a *Admin) readShardedState(ctx context.Context, id string) (IDState, error) {
	c, err := a.idCursor(ctx, id)
	if err != nil {
		return IDState{}, err
	}
	unit, err := a.unit(id)
	if err != nil {
		return IDState{}, err
	}
	st, err := store.LoadStateWith(ctx, a.w, id, wire.KeySubject(a.world, wire.CursorKey(unit)), 0)
	if err != nil {
		return IDState{}, err
	}
	return IDState{ID: id, Cursor: c.Seq, Values: st.Values, Deleted: len(st.Gone)}, nil
}

// cursorBytes is the cursor DeleteState writes again unchanged (the id's,
// or its shard's), encoded, and the stream sequence it was read at.
func (a *Admin) cursorBytes(ctx context.Context, id, unit string) ([]byte, uint64, error) {
	if a.cfg.Shards == 0 {
		c, at, err := store.ReadCursor(ctx, a.w, id)
		if err != nil {
			return nil, 0, err
		}
		b, err := wire.EncodeCursor(c)
		return b, at, err
	}
	q, _ := wire.UnitShard(unit, a.cfg.Shards)
	sc, err := a.readShardCursor(ctx, q)
	if err != nil {
		return nil, 0, err
	}
	b, err := wire.EncodeShardCursor(sc)
	return b, 0, err
}
