package drain

import (
	"context"
	"fmt"

	"github.com/fencepost/fencepost/internal/store"
	"github.com/fencepost/fencepost/internal/wire"
)

// readCursor reads id's cursor (store.ReadCursor's answer). On a single
// replica the reads of drains that begin at the same time go out together
// in multi-last direct gets (jsapi.LastReads, as ownership's holder checks
// do): a worker that claims many ids at once, as fan-in's and zipf's do,
// read each id's cursor with a request of its own, a tenth of a fan-in
// run's requests. Each read is sent after it was asked for, so it sees
// every cursor stored before that, as a read of its own would; the answer
// is proven whole, so a cursor absent from it has no message.
func (d *Drainer) readCursor(ctx context.Context, id string) (wire.Cursor, uint64, error) {
	if d.cfg.Replicas != 1 {
		return store.ReadCursor(ctx, d.w, id)
	}
	m, err := d.cursors.Read(ctx, wire.KeySubject(d.world, wire.CursorKey(id)))
	if err != nil {
		return wire.Cursor{}, 0, fmt.Errorf("drain: read the cursor of %q: %w", id, err)
	}
	return store.CursorOf(id, m)
}
