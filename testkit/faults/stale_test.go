package faults

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/server/servertest"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// TestStaleHolderHandsOutNothingAfterTakeover: a holder A is cut off from
// the server in the middle of a batch (its handler is busy with the first
// message, as a paused process would be), its lease and drain lock lapse,
// B seizes the id and drains the whole mailbox. When A's handler returns,
// A's drain must not hand the rest of its batch to the handler: its
// authority ran out long ago and a newer holder has delivered those
// messages already (docs/contract.md invariant 4, section 5 "every route
// refuses work on a lapsed lease"). The fence keeps A from committing
// either way; this is about deliveries.
func TestStaleHolderHandsOutNothingAfterTakeover(t *testing.T) {
	node := servertest.New(t)
	p, err := NewProxy(strings.TrimPrefix(node.ClientURL(), "nats://"))
	require.NoError(t, err)
	defer p.Close()
	ctx := testutil.Ctx(t, time.Minute)

	admin, err := client.Connect(node.ClientURL(), client.WithLogger(quiet))
	require.NoError(t, err)
	defer admin.Close()
	w, err := admin.CreateWorld(ctx, "stale", world.Config{MinTTL: 10 * time.Millisecond})
	require.NoError(t, err)
	const n = 20
	for i := range n {
		_, err := w.Queue.Send(ctx, "x", []byte(fmt.Sprint(i)))
		require.NoError(t, err)
	}

	// A, through the proxy.
	ca, err := client.Connect(p.URL(), client.WithLogger(quiet), client.WithTimeout(500*time.Millisecond), natsOpts())
	require.NoError(t, err)
	defer ca.Close()
	wa, err := ca.World(ctx, "stale")
	require.NoError(t, err)
	const ttl = 300 * time.Millisecond
	la, err := wa.Ownership.Claim(ctx, "x", "A", ttl)
	require.NoError(t, err)
	dra, err := drain.New(wa.World, wa.Ownership, drain.WithLockTTL(ttl), drain.WithLogger(quiet))
	require.NoError(t, err)

	var (
		mu       sync.Mutex
		byA      []uint64
		resume   = make(chan struct{})
		inFirst  = make(chan struct{})
		afterB   atomic.Bool
		staleHit atomic.Int32
	)
	aDone := make(chan error, 1)
	go func() {
		_, err := dra.DrainLease(ctx, la, func(_ context.Context, m drain.Message) error {
			mu.Lock()
			first := len(byA) == 0
			byA = append(byA, m.Seq)
			mu.Unlock()
			if afterB.Load() {
				staleHit.Add(1)
			}
			if first {
				close(inFirst)
				<-resume // A is "paused" here
			}
			return nil
		})
		aDone <- err
	}()
	<-inFirst
	// Cut A off: no renewal of its lease or its drain lock gets through.
	p.Refuse(time.Hour)
	p.CutAll()

	// B takes over once A's lease has lapsed (seize without force), and
	// drains everything, waiting for A's drain lock to lapse.
	var lb *ownership.Lease
	testutil.WaitFor(t, 10*time.Second, "B seizes x", func() bool {
		lb, err = w.Ownership.Seize(ctx, "x", "B", time.Minute, false)
		return err == nil
	})
	testutil.WaitFor(t, 10*time.Second, "B drains x", func() bool {
		bres, err := w.Drainer.DrainLease(ctx, lb, func(context.Context, drain.Message) error { return nil })
		if err == nil {
			require.Equal(t, n, bres.Count)
		}
		return err == nil
	})
	afterB.Store(true)

	// A wakes up, and its network is back (a paused process resumed).
	p.Refuse(0)
	close(resume)
	select {
	case err := <-aDone:
		require.Error(t, err, "A's drain cannot succeed: it lost the id")
	case <-time.After(30 * time.Second):
		t.Fatal("A's drain did not end")
	}
	mu.Lock()
	defer mu.Unlock()
	require.Zero(t, staleHit.Load(), "A handed %d messages to its handler after B had taken over and delivered them (A delivered %v)", staleHit.Load(), byA)
}
