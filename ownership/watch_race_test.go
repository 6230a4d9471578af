package ownership_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// TestWatch_ChangesRightAfterStart: a change written right after Watch
// returns is reported, each in turn, many times over. Each write waits for
// the previous event: the bucket keeps one revision per key, so a change
// overwritten before the watcher reads it is folded into the later one
// (TestWatch_FoldsButEndsOnTheLatestState).
func TestWatch_ChangesRightAfterStart(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{})
	s := w.Ownership
	for i := range 40 {
		id := fmt.Sprintf("w-%d", i)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		ch, err := s.Watch(ctx, id)
		require.NoError(t, err)
		var kinds []ownership.EventKind
		next := func() {
			t.Helper()
			select {
			case ev := <-ch:
				kinds = append(kinds, ev.Kind)
			case <-time.After(5 * time.Second):
				t.Fatalf("round %d: events %v, want claimed renewed released", i, kinds)
			}
		}
		_, err = s.Claim(ctx, id, "n1", time.Minute)
		require.NoError(t, err)
		next()
		_, err = s.Renew(ctx, id, "n1", time.Minute)
		require.NoError(t, err)
		next()
		require.NoError(t, s.Release(ctx, id, "n1"))
		next()
		require.Equal(t, []ownership.EventKind{ownership.EventClaimed, ownership.EventRenewed, ownership.EventReleased}, kinds, "round %d", i)
		cancel()
	}
}

// TestWatch_FoldsButEndsOnTheLatestState: writes in a burst may be folded,
// but the last event always names the record's latest state. Its kind is
// the change from the last state the watcher saw: when the final release
// is folded into the claim after it, the watcher saw a live holder
// replaced by a new epoch, which reads as seized (about one run in 100
// under -race).
func TestWatch_FoldsButEndsOnTheLatestState(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{})
	s := w.Ownership
	ctx := testutil.Ctx(t, time.Minute)
	ch, err := s.Watch(ctx, "burst")
	require.NoError(t, err)
	var epoch uint64
	for j := range 20 {
		l, err := s.Claim(ctx, "burst", fmt.Sprintf("n%d", j), time.Minute)
		require.NoError(t, err)
		epoch = l.Epoch
		require.NoError(t, s.Release(ctx, "burst", l.Node))
	}
	l, err := s.Claim(ctx, "burst", "last", time.Minute)
	require.NoError(t, err)
	var seen []string
	for {
		select {
		case ev := <-ch:
			seen = append(seen, fmt.Sprintf("%s %s %d", ev.Kind, ev.Node, ev.Epoch))
			require.GreaterOrEqual(t, ev.Epoch, uint64(1))
			if (ev.Kind == ownership.EventClaimed || ev.Kind == ownership.EventSeized) && ev.Node == "last" {
				require.Equal(t, l.Epoch, ev.Epoch)
				require.Greater(t, ev.Epoch, epoch)
				return
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("the latest state was never reported; events: %v", seen)
		}
	}
}
