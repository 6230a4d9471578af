package wire_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/internal/wire"
)

// FuzzDecodeShardCursor: a stored shard cursor is read whole or refused
// (ErrCorruptRecord, ErrUnknownVersion), never with a panic; what is read
// encodes back to what decodes the same; its exceptions are of ids' tokens
// at or below its mark, at most MaxPendingIDs; and Committed agrees with
// Low: every message of a pending id below Low is committed... and no
// message at or above Low of a pending id is.
func FuzzDecodeShardCursor(f *testing.F) {
	f.Add([]byte(`{"v":1,"seq":41}`))
	f.Add([]byte(`{"v":1,"seq":41,"pending":{"YQ":{"seq":7,"failures":2,"error":"x"}}}`))
	f.Add([]byte(`{"v":1,"seq":41,"pending":{"YQ":{"seq":42}}}`))
	f.Add([]byte(`{"v":1,"seq":41,"pending":{"a.b":{"seq":7}}}`))
	f.Add([]byte(`{"v":1,"seq":41,"pending":{"YQ":{"seq":7,"error":"no failures"}}}`))
	f.Add([]byte(`{"v":2,"seq":41}`))
	f.Add([]byte(`{"v":1,"seq":41,"extra":1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := wire.DecodeShardCursor(data)
		if err != nil {
			require.True(t, refused(err), "%v", err)
			return
		}
		require.LessOrEqual(t, len(c.Pending), wire.MaxPendingIDs)
		low := c.Low()
		require.LessOrEqual(t, low, c.Seq+1)
		for eid, p := range c.Pending {
			_, derr := wire.DecodeID(eid)
			require.NoError(t, derr, "pending %q", eid)
			require.LessOrEqual(t, p.Seq, c.Seq)
			require.GreaterOrEqual(t, p.Seq, low)
			require.False(t, c.Committed(eid, p.Seq), "a pending id's first message is not committed")
			if p.Seq > 1 {
				require.True(t, c.Committed(eid, p.Seq-1), "below a pending id's first message, committed")
			}
		}
		require.False(t, c.Committed("YQ", c.Seq+1), "above the mark, nothing is committed")
		b, err := wire.EncodeShardCursor(c)
		require.NoError(t, err)
		again, err := wire.DecodeShardCursor(b)
		require.NoError(t, err)
		require.Equal(t, c.Seq, again.Seq)
		require.Equal(t, len(c.Pending), len(again.Pending))
	})
}

// TestShardCursor_Below: a cursor moved back below a sequence covers only
// what the cursor covered, and drops the exceptions above its new mark.
func TestShardCursor_Below(t *testing.T) {
	c := wire.ShardCursor{Seq: 100, Pending: map[string]wire.PendingID{"YQ": {Seq: 50}, "Yg": {Seq: 90}}}
	b := c.Below(80)
	require.Equal(t, uint64(79), b.Seq)
	require.Contains(t, b.Pending, "YQ")
	require.NotContains(t, b.Pending, "Yg")
	for _, eid := range []string{"YQ", "Yg", "Yw"} {
		for seq := uint64(1); seq <= 100; seq++ {
			if b.Committed(eid, seq) {
				require.True(t, c.Committed(eid, seq), "%s %d", eid, seq)
			}
		}
	}
}
