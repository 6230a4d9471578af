package ownership_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// TestOwnership_TermAboveMaxTTL_IsLapsed: a held record whose expiry lies
// further from now than the world's max ttl (plus MaxTermSlack), which
// no claim, renew or seize writes but a compromised owner writing the
// bucket directly can (docs/security.md's attacks: "expiry in 2027"), is read as lapsed:
// Owner says not held, the forger's fence is not authorized, and another
// node claims the id at the next epoch. The same for a record backed by a
// node lease with such a term: the claim retires that node lease first.
// A term within the bound is live, as before.
func TestOwnership_TermAboveMaxTTL_IsLapsed(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{MaxTTL: 10 * time.Second})
	ctx := testutil.Ctx(t, time.Minute)
	put := func(key string, r wire.Record) uint64 {
		t.Helper()
		b, err := wire.EncodeRecord(r)
		require.NoError(t, err)
		rev, err := handles.Of(w).KV.Put(ctx, key, b)
		require.NoError(t, err)
		return rev
	}
	now := time.Now()
	far := now.Add(time.Hour) // "2027": far above max_ttl 10 s
	bound := 10*time.Second + ownership.MaxTermSlack

	t.Run("record", func(t *testing.T) {
		put(wire.RecordKey("forged"), wire.Record{Node: "mallory", Epoch: 5, State: wire.StateHeld, TTLms: 1000, Acquired: now, Expires: far})
		st, err := w.Ownership.Owner(ctx, "forged")
		require.NoError(t, err)
		require.False(t, st.Held, "a term above max_ttl is lapsed")
		_, err = w.Ownership.Authorize(ctx, "forged", "mallory", 5)
		require.ErrorIs(t, err, ownership.ErrFree, "the forger's fence answers owner")
		l, err := w.Ownership.Claim(ctx, "forged", "honest", time.Second)
		require.NoError(t, err)
		require.Equal(t, uint64(6), l.Epoch)
	})

	t.Run("within the bound", func(t *testing.T) {
		put(wire.RecordKey("long"), wire.Record{Node: "patient", Epoch: 2, State: wire.StateHeld, TTLms: 1000, Acquired: now, Expires: now.Add(bound - 2*time.Second)})
		st, err := w.Ownership.Owner(ctx, "long")
		require.NoError(t, err)
		require.True(t, st.Held)
		_, err = w.Ownership.Claim(ctx, "long", "honest", time.Second)
		require.ErrorIs(t, err, ownership.ErrHeld)
	})

	t.Run("node lease", func(t *testing.T) {
		put(wire.NodeKey("mallory-n"), wire.Record{Node: "mallory-n", Epoch: 3, State: wire.StateHeld, TTLms: 1000, Acquired: now, Expires: far})
		put(wire.RecordKey("backed"), wire.Record{Node: "mallory-n", Epoch: 7, State: wire.StateHeld, TTLms: 1000, Acquired: now, Expires: far, NodeLease: 3})
		st, err := w.Ownership.Owner(ctx, "backed")
		require.NoError(t, err)
		require.False(t, st.Held, "a node lease term above max_ttl is lapsed")
		l, err := w.Ownership.Claim(ctx, "backed", "honest", time.Second)
		require.NoError(t, err)
		require.Equal(t, uint64(8), l.Epoch)
		e, err := handles.Of(w).KV.Get(ctx, wire.NodeKey("mallory-n"))
		require.NoError(t, err)
		nl, err := wire.DecodeRecord(e.Value())
		require.NoError(t, err)
		require.Equal(t, wire.StateFree, nl.State, "the taker retired the overlong node lease")
	})
}
