package ownership_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// scanAll runs ScanRecords and returns what it listed, by id.
func scanAll(t *testing.T, ctx context.Context, s *ownership.Store) (map[string]ownership.Listed, ownership.ScanStats) {
	t.Helper()
	got := map[string]ownership.Listed{}
	st, err := s.ScanRecords(ctx, func(l ownership.Listed) error {
		_, dup := got[l.ID]
		require.False(t, dup, "%q listed twice", l.ID)
		got[l.ID] = l
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, len(got), st.Records)
	return got, st
}

// TestScanRecords: every id with a record, judged as Owner judges it
// (own leases, session-backed ones, released, lapsed), once each; a
// deleted record is not listed, a record that does not decode is listed
// with its error, and a key that is no id's is counted as skipped.
func TestScanRecords(t *testing.T) {
	suite(t, func(t *testing.T, env *testutil.Env, w *client.World) {
		ctx := testutil.Ctx(t, time.Minute)
		s := w.Ownership
		got, st := scanAll(t, ctx, s)
		require.Empty(t, got, "a new world has no records")
		require.Zero(t, st.Skipped)

		odd := "日本.* x>/"
		for _, id := range []string{"held", odd, "released", "lapsed", "deleted"} {
			_, err := s.Claim(ctx, id, "n1", time.Minute)
			require.NoError(t, err)
		}
		require.NoError(t, s.Release(ctx, "released", "n1"))
		_, err := s.Claim(ctx, "short", "n2", 10*time.Millisecond)
		require.NoError(t, err)
		ss, err := s.OpenSession(ctx, "n3", time.Minute)
		require.NoError(t, err)
		defer ss.Close()
		for _, id := range []string{"backed.1", "backed.2"} {
			_, err := ss.Claim(ctx, id)
			require.NoError(t, err)
		}
		require.NoError(t, handles.Of(w).KV.Delete(ctx, wire.RecordKey("deleted")))
		_, err = handles.Of(w).KV.Put(ctx, wire.RecordKey("corrupt"), []byte(`{"v":2}`))
		require.NoError(t, err)
		_, err = handles.Of(w).KV.Put(ctx, wire.RecordPrefix+"b3JkZXIuNDK", []byte(`{}`)) // non-zero trailing bits: no id's key
		require.NoError(t, err)
		time.Sleep(20 * time.Millisecond) // "short" lapses

		got, st = scanAll(t, ctx, s)
		require.Equal(t, 1, st.Skipped)
		require.ElementsMatch(t, []string{"held", odd, "released", "lapsed", "short", "backed.1", "backed.2", "corrupt"}, listedIDs(got))
		for id, l := range got {
			if id == "corrupt" {
				require.ErrorIs(t, l.Err, wire.ErrUnknownVersion)
				require.NotZero(t, l.Revision)
				continue
			}
			require.NoError(t, l.Err, id)
			want, err := s.Owner(ctx, id)
			require.NoError(t, err)
			require.Equal(t, want, l.Status, id)
		}
		require.True(t, got["held"].Held)
		require.Equal(t, "n1", got[odd].Node)
		require.False(t, got["released"].Held)
		require.EqualValues(t, 1, got["released"].Epoch)
		require.False(t, got["short"].Held)
		require.True(t, got["backed.1"].Held)
		require.Equal(t, "n3", got["backed.2"].Node)

		// The session ends: its ids are free at once, without a write to them.
		require.NoError(t, ss.Close())
		got, _ = scanAll(t, ctx, s)
		require.False(t, got["backed.1"].Held)
		require.False(t, got["backed.2"].Held)
		require.True(t, got["held"].Held)
	})
}

// TestScanRecords_CallbackErrorStops: the first error of the callback ends
// the scan and is returned.
func TestScanRecords_CallbackErrorStops(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{})
	ctx := testutil.Ctx(t, time.Minute)
	for _, id := range []string{"a", "b", "c"} {
		_, err := w.Ownership.Claim(ctx, id, "n1", time.Minute)
		require.NoError(t, err)
	}
	stop := context.Canceled
	calls := 0
	_, err := w.Ownership.ScanRecords(ctx, func(ownership.Listed) error { calls++; return stop })
	require.ErrorIs(t, err, stop)
	require.Equal(t, 1, calls)
}

func listedIDs(m map[string]ownership.Listed) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
