package ownership_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/testkit/testutil"
)

// TestUnchanged_Concurrent: many holdings checking their records at once
// (on a single replica they share multi-last reads) each get their own
// record's answer: true at the revision they hold, false at any other,
// false once the id was seized or released; an id never written is false.
func TestUnchanged_Concurrent(t *testing.T) {
	suite(t, func(t *testing.T, env *testutil.Env, w *client.World) {
		ctx := testutil.Ctx(t, time.Minute)
		s := w.Ownership
		const n = 300
		leases := make([]*ownership.Lease, n)
		for i := range n {
			l, err := s.Claim(ctx, fmt.Sprintf("id-%d", i), "n1", time.Minute)
			require.NoError(t, err)
			leases[i] = l
		}
		// Every third id moves on: seized by another node or released.
		for i := 0; i < n; i += 3 {
			id := leases[i].ID
			if i%2 == 0 {
				_, err := s.Seize(ctx, id, "n2", time.Minute, true)
				require.NoError(t, err)
			} else {
				require.NoError(t, s.Release(ctx, id, "n1"))
			}
		}
		var wg sync.WaitGroup
		errs := make(chan error, 3*n)
		for round := range 3 {
			for i, l := range leases {
				wg.Go(func() {
					rev := l.Fence.Revision
					if round == 1 {
						rev++ // a revision the holding never had
					}
					same, err := s.Unchanged(ctx, l.ID, rev)
					want := round != 1 && i%3 != 0
					if err != nil || same != want {
						errs <- fmt.Errorf("round %d, %s at %d: %v, %v; want %v", round, l.ID, rev, same, err, want)
					}
				})
			}
		}
		wg.Go(func() {
			if same, err := s.Unchanged(ctx, "never-written", 0); err != nil || same {
				errs <- fmt.Errorf("an id never written: %v, %v", same, err)
			}
		})
		wg.Wait()
		close(errs)
		var bad []string
		for err := range errs {
			bad = append(bad, err.Error())
		}
		slices.Sort(bad)
		require.Empty(t, bad)
	})
}
