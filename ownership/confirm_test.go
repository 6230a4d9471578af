package ownership_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// TestConfirm_ReadAnswersCost: on a replicated world every answer decided
// on a read (owner, guard, each refusal) sends one read barrier, or three
// for a record backed by a node lease (record, node lease, record); an
// answer that is a stored write sends none; a single replica sends none.
// A barrier on a record never written (revision 0) is stored: the server
// takes 0 for "no message on that subject".
func TestConfirm_ReadAnswersCost(t *testing.T) {
	suite(t, func(t *testing.T, env *testutil.Env, w *client.World) {
		ctx := testutil.Ctx(t, time.Minute)
		s := w.Ownership
		per := int64(0)
		if w.Config.Replicas > 1 {
			per = 1
		}
		cost := func(what string, want int64, fn func()) {
			t.Helper()
			b := ownership.Barriers(s)
			fn()
			require.Equal(t, want, ownership.Barriers(s)-b, "barriers of %s", what)
		}
		var l *ownership.Lease
		cost("a claim of a new id", 0, func() {
			var err error
			l, err = s.Claim(ctx, "c", "a", time.Minute)
			require.NoError(t, err)
		})
		cost("owner", per, func() {
			st, err := s.Owner(ctx, "c")
			require.NoError(t, err)
			require.True(t, st.Held)
			require.Equal(t, "a", st.Node)
		})
		cost("owner of an id never written", per, func() {
			st, err := s.Owner(ctx, "never")
			require.NoError(t, err)
			require.False(t, st.Held)
			require.Zero(t, st.Revision)
		})
		cost("guard", per, func() {
			_, err := s.Guard(ctx, "c", "a", l.Epoch)
			require.NoError(t, err)
		})
		cost("a claim refused", per, func() {
			_, err := s.Claim(ctx, "c", "b", time.Minute)
			var held *ownership.HeldError
			require.ErrorAs(t, err, &held)
			require.Equal(t, "a", held.Node)
		})
		cost("a renew refused", per, func() {
			_, err := s.Renew(ctx, "c", "b", time.Minute)
			require.ErrorIs(t, err, ownership.ErrHeld)
		})
		cost("a release refused", per, func() {
			require.ErrorIs(t, s.Release(ctx, "c", "b"), ownership.ErrNotOwner)
		})
		cost("a seize refused", per, func() {
			_, err := s.Seize(ctx, "never", "b", time.Minute, false)
			require.ErrorIs(t, err, ownership.ErrFree)
		})
		cost("a renewal", 0, func() {
			_, err := s.Renew(ctx, "c", "a", time.Minute)
			require.NoError(t, err)
		})
		cost("a release", 0, func() {
			require.NoError(t, s.Release(ctx, "c", "a"))
		})
		ss, err := s.OpenSession(ctx, "n1", time.Minute)
		require.NoError(t, err)
		defer ss.Close()
		cost("a session's claim", 0, func() {
			_, err := ss.Claim(ctx, "backed")
			require.NoError(t, err)
		})
		cost("owner of a backed record", 3*per, func() {
			st, err := s.Owner(ctx, "backed")
			require.NoError(t, err)
			require.True(t, st.Held)
			require.Equal(t, "n1", st.Node)
		})
	})
}

// TestConfirm_MovedReadIsReadAgain: a record written between the read an
// answer is decided on and its barrier makes the barrier fail, and the
// answer is decided again on a new read: owner reports the release made in
// between, and a claim refused as held-by on the first read wins on the
// second (on a single replica, where no barrier is sent, the claim is
// refused: the read there is the state itself).
func TestConfirm_MovedReadIsReadAgain(t *testing.T) {
	for _, tg := range testutil.Targets() {
		if !tg.Cluster {
			continue
		}
		t.Run(tg.Name, func(t *testing.T) {
			env := testutil.Start(t, tg)
			w := env.World(t, world.Config{})
			ctx := testutil.Ctx(t, time.Minute)
			s := w.Ownership
			// The writer in between is another client's store.
			c2, err := client.Connect(env.URL, client.WithTimeout(10*time.Second))
			require.NoError(t, err)
			defer c2.Close()
			w2, err := c2.World(ctx, w.Name)
			require.NoError(t, err)

			for _, id := range []string{"m-owner", "m-claim"} {
				_, err := w2.Ownership.Claim(ctx, id, "a", time.Minute)
				require.NoError(t, err)
			}
			releaseOnce := func(id string) func(string) {
				done := false
				return func(got string) {
					if got != id || done {
						return
					}
					done = true
					require.NoError(t, w2.Ownership.Release(context.Background(), id, "a"))
				}
			}

			ownership.SetBeforeConfirm(s, releaseOnce("m-owner"))
			b := ownership.Barriers(s)
			st, err := s.Owner(ctx, "m-owner")
			require.NoError(t, err)
			require.False(t, st.Held, "owner answered the read the release had moved past")
			require.Equal(t, int64(2), ownership.Barriers(s)-b, "one barrier refused, one stored")

			ownership.SetBeforeConfirm(s, releaseOnce("m-claim"))
			l, err := s.Claim(ctx, "m-claim", "b", time.Minute)
			require.NoError(t, err, "a claim refused on a read the release had moved past")
			require.Equal(t, "b", l.Node)
			require.Equal(t, uint64(2), l.Epoch)
			ownership.SetBeforeConfirm(s, nil)
		})
	}
}
