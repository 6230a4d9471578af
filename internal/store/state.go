package store

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/fencing"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/world"
)

// StateRead is an id's state as read: its values, and the keys deleted
// whose delete marker is still in the bucket (with its stream sequence).
type StateRead struct {
	Values map[string][]byte
	Gone   map[string]uint64
}

// LoadState reads id's state, as stored with its last cursor (whose
// stream sequence the caller read through the leader: cursorAt, 0 when
// the id has no cursor; ReadCursor). One multi-last direct get of the
// state keys and the cursor: the server answers it from one view of the
// stream. On a replicated world a replica may lag: the answer counts only
// if its cursor is the one the leader has (or later), since every state
// write is stored with or before a cursor write of the same id.
func LoadState(ctx context.Context, w *world.World, id string, cursorAt uint64) (StateRead, error) {
	return LoadStateWith(ctx, w, id, wire.KeySubject(w.Name, wire.CursorKey(id)), cursorAt)
}

// LoadStateWith is LoadState with the cursor the id's state is stored
// with named: its own (LoadState), or its shard's in a sharded world.
func LoadStateWith(ctx context.Context, w *world.World, id, csubj string, cursorAt uint64) (StateRead, error) {
	stream := wire.BucketStream(w.Name)
	nc := handles.Of(w).JS.Conn()
	for attempt := 1; ; attempt++ {
		b, err := jsapi.DirectGet(ctx, nc, stream, jsapi.GetRequest{MultiLast: []string{wire.StateFilter(w.Name, id), csubj}, Batch: wire.MaxStateSubjects + 1})
		if err != nil {
			return StateRead{}, fmt.Errorf("read the state of %q: %w", id, err)
		}
		if b.Pending > 0 {
			return StateRead{}, fmt.Errorf("the state of %q has more than %d keys (deleted ones included; `fencepost state ID --delete` purges them): %w", id, wire.MaxStateSubjects, wire.ErrInvalidState)
		}
		st := StateRead{Values: map[string][]byte{}, Gone: map[string]uint64{}}
		var at uint64
		for _, m := range b.Msgs {
			if m.Subject == csubj {
				at = m.Sequence
				continue
			}
			key, err := wire.StateKeyOf(w.Name, id, m.Subject)
			if err != nil {
				return StateRead{}, fmt.Errorf("the state of %q holds %s, which no fencepost wrote (it is left as it is): %w", id, m.Subject, err)
			}
			if jsapi.IsMarker(m.Header) {
				st.Gone[key] = m.Sequence
			} else {
				st.Values[key] = m.Data
			}
		}
		if at >= cursorAt {
			return st, nil
		}
		if attempt >= 100 {
			return StateRead{}, fmt.Errorf("the state of %q: the replicas' answers stayed behind the leader's cursor (sequence %d, read %d)", id, cursorAt, at)
		}
		if err := Sleep(ctx, 5*time.Millisecond); err != nil {
			return StateRead{}, err
		}
	}
}

// StateWrite is one write of a state batch; Value nil: delete.
type StateWrite struct {
	Key   string
	Value []byte
}

// StateMsgs is a state batch of world: the writes, then the cursor, each
// with the fence (the writes are of the fence's id).
func StateMsgs(world string, f fencing.Fence, cursorSubj string, cursor []byte, w []StateWrite) []*nats.Msg {
	ws := make([]IDStateWrite, len(w))
	for i, x := range w {
		ws[i] = IDStateWrite{ID: f.ID, StateWrite: x}
	}
	return ShardStateMsgs(world, f, cursorSubj, cursor, ws)
}

// IDStateWrite is one write of a state batch that carries several ids'
// state (a shard's commit).
type IDStateWrite struct {
	ID string
	StateWrite
}

// ShardStateMsgs is a state batch of several ids, fenced by one record
// (a shard's): the writes, then the cursor, each with the fence.
func ShardStateMsgs(world string, f fencing.Fence, cursorSubj string, cursor []byte, w []IDStateWrite) []*nats.Msg {
	msgs := make([]*nats.Msg, 0, len(w)+1)
	for _, x := range w {
		m := nats.NewMsg(wire.KeySubject(world, wire.StateKey(x.ID, x.Key)))
		if x.Value == nil {
			m.Header.Set(jsapi.HeaderKVOperation, jsapi.KVOpDelete)
		} else {
			m.Data = x.Value
		}
		f.Apply(m)
		msgs = append(msgs, m)
	}
	m := nats.NewMsg(cursorSubj)
	m.Data = cursor
	f.Apply(m)
	return append(msgs, m)
}

// PublishCommit writes the cursor with the fence: alone, or with the
// state's writes in one atomic batch (StateMsgs).
func PublishCommit(ctx context.Context, w *world.World, f fencing.Fence, cursorSubj string, cursor []byte, writes []StateWrite) (*jetstream.PubAck, error) {
	js := handles.Of(w).JS
	if len(writes) == 0 {
		return js.Publish(ctx, cursorSubj, cursor, f.Expect())
	}
	return jsapi.PublishBatch(ctx, js, StateMsgs(w.Name, f, cursorSubj, cursor, writes))
}
