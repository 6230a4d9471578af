package drain_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/store"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// TestReadCursor_BatchedAsAlone: cursor reads that come at once on a
// single replica go out in shared multi-last reads, and each gets what a
// read of its own (store.ReadCursor) gets: a cursor, none (never written,
// or deleted: a marker, at its sequence), or an error for a cursor that
// does not decode, which fails that read only. 300 reads at once take far
// fewer than 300 requests.
func TestReadCursor_BatchedAsAlone(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{})
	ctx := testutil.Ctx(t, time.Minute)
	kv := handles.Of(w).KV
	const n = 300
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("id-%d", i)
		key := wire.CursorKey(ids[i])
		switch i % 4 {
		case 1:
			data, err := wire.EncodeCursor(wire.Cursor{Seq: uint64(i)})
			require.NoError(t, err)
			_, err = kv.Put(ctx, key, data)
			require.NoError(t, err)
		case 2:
			data, err := wire.EncodeCursor(wire.Cursor{Seq: 7})
			require.NoError(t, err)
			_, err = kv.Put(ctx, key, data)
			require.NoError(t, err)
			require.NoError(t, kv.Delete(ctx, key))
		case 3:
			_, err := kv.Put(ctx, key, []byte("garbage"))
			require.NoError(t, err)
		}
	}
	type answer struct {
		c   wire.Cursor
		at  uint64
		err error
	}
	want := make([]answer, n)
	for i, id := range ids {
		c, at, err := store.ReadCursor(ctx, w.World, id)
		want[i] = answer{c, at, err}
	}

	inMsgs := func() int64 {
		v, err := env.Node.Varz(nil)
		require.NoError(t, err)
		return v.InMsgs
	}
	got := make([]answer, n)
	before := inMsgs()
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() {
			c, at, err := drain.ReadCursor(ctx, w.Drainer, id)
			got[i] = answer{c, at, err}
		})
	}
	wg.Wait()
	requests := inMsgs() - before

	for i := range ids {
		if want[i].err != nil {
			require.Error(t, got[i].err, ids[i])
			require.Equal(t, want[i].err.Error(), got[i].err.Error(), ids[i])
			continue
		}
		require.NoError(t, got[i].err, ids[i])
		require.Equal(t, want[i].c, got[i].c, ids[i])
		require.Equal(t, want[i].at, got[i].at, ids[i])
		switch i % 4 {
		case 0:
			require.Zero(t, got[i].at, "%s: never written", ids[i])
		case 1:
			require.Equal(t, uint64(i), got[i].c.Seq, ids[i])
		case 2:
			require.NotZero(t, got[i].at, "%s: the marker's sequence", ids[i])
			require.Zero(t, got[i].c.Seq, "%s: deleted", ids[i])
		}
	}
	require.Less(t, requests, int64(n/2), "requests for %d cursor reads at once", n)
	t.Logf("%d cursor reads at once: %d requests", n, requests)
}
