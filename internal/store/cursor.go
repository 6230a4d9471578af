package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/world"
)

// ReadCursor reads id's cursor through the bucket stream's leader (on a
// single replica, the direct get it answers is the same read without the
// JetStream API queue); an absent (or deleted) cursor is zero. at is the
// stream sequence of the cursor's message (0: none).
func ReadCursor(ctx context.Context, w *world.World, id string) (c wire.Cursor, at uint64, err error) {
	subj := wire.KeySubject(w.Name, wire.CursorKey(id))
	h := handles.Of(w)
	var m *jetstream.RawStreamMsg
	if w.Config.Replicas == 1 {
		// jsapi's direct get, not nats.go's: the sequence is the server's
		// header, the last of its name (a writer may have stored one).
		m, err = jsapi.DirectLast(ctx, h.JS.Conn(), wire.BucketStream(w.Name), subj)
	} else {
		m, err = jsapi.LeaderGet(ctx, h.JS.Conn(), wire.BucketStream(w.Name), jsapi.GetRequest{LastFor: subj})
	}
	if errors.Is(err, jsapi.ErrNotFound) {
		return wire.Cursor{}, 0, nil
	}
	if err != nil {
		return wire.Cursor{}, 0, err
	}
	return CursorOf(id, m)
}

// CursorOf is the cursor of id that m, the last message of its cursor key
// (nil: none), holds, and the stream sequence of m (0: none). A delete
// marker is a zero cursor at its sequence.
func CursorOf(id string, m *jetstream.RawStreamMsg) (wire.Cursor, uint64, error) {
	if m == nil {
		return wire.Cursor{}, 0, nil
	}
	if jsapi.IsMarker(m.Header) {
		return wire.Cursor{}, m.Sequence, nil
	}
	c, err := wire.DecodeCursor(m.Data)
	if err != nil {
		return wire.Cursor{}, 0, fmt.Errorf("cursor of %q (key %s): %w; it is left as it is", id, wire.CursorKey(id), err)
	}
	return c, m.Sequence, nil
}
