package wire_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/internal/wire"
)

func TestRecord_NodeLease(t *testing.T) {
	now := time.Date(2026, 11, 29, 21, 0, 0, 0, time.UTC)
	nl := wire.Record{Node: "n", Epoch: 4, State: wire.StateHeld, TTLms: 10000, Acquired: now, Expires: now.Add(10 * time.Second)}
	id := wire.Record{Node: "n", Epoch: 9, State: wire.StateHeld, TTLms: 10000, Acquired: now, Expires: now.Add(time.Second), NodeLease: 4}

	b, err := wire.EncodeRecord(id)
	require.NoError(t, err)
	require.Contains(t, string(b), `"node_lease":4`)
	got, err := wire.DecodeRecord(b)
	require.NoError(t, err)
	require.Equal(t, uint64(4), got.NodeLease)
	b, err = wire.EncodeRecord(nl)
	require.NoError(t, err)
	require.NotContains(t, string(b), "node_lease", "a record without a node lease is written as before")

	t.Run("liveness follows the node lease", func(t *testing.T) {
		later := now.Add(5 * time.Second) // past the id record's own expiry
		require.True(t, id.LiveBacked(&nl, later))
		require.False(t, id.LiveBacked(nil, later), "node lease absent or deleted")
		require.False(t, id.LiveBacked(&nl, nl.Expires), "node lease lapsed (exact expiry is lapsed)")
		other := nl
		other.Epoch = 5
		require.False(t, id.LiveBacked(&other, later), "another session of the node")
		other = nl
		other.Node = "m"
		require.False(t, id.LiveBacked(&other, later), "another node's lease")
		other = nl
		other.State = wire.StateFree
		require.False(t, id.LiveBacked(&other, later), "released or retired node lease")
		plain := id
		plain.NodeLease = 0
		require.False(t, plain.LiveBacked(&nl, later), "a plain record keeps its own expiry")
		require.True(t, plain.LiveBacked(nil, now))
	})
	t.Run("strict", func(t *testing.T) {
		_, err := wire.DecodeRecord([]byte(`{"v":1,"node":"n","epoch":1,"state":"free","ttl_ms":0,"acquired":"2026-01-01T00:00:00Z","expires":"2026-01-01T00:00:00Z","node_lease":3}`))
		require.ErrorIs(t, err, wire.ErrCorruptRecord, "a free record names no node lease")
		_, err = wire.DecodeRecord([]byte(`{"v":1,"node":"n","epoch":1,"state":"held","ttl_ms":1,"acquired":"2026-01-01T00:00:00Z","expires":"2026-01-01T00:00:01Z","node_lease":-1}`))
		require.ErrorIs(t, err, wire.ErrCorruptRecord)
		_, err = wire.DecodeRecord([]byte(`{"v":1,"node":"n","epoch":1,"state":"held","ttl_ms":1,"acquired":"2026-01-01T00:00:00Z","expires":"2026-01-01T00:00:01Z","node_lease":"3"}`))
		require.ErrorIs(t, err, wire.ErrCorruptRecord)
	})
}
