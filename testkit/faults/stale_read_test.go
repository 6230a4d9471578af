package faults

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/world"
)

// TestStaleRead_DeposedBucketLeader (docs/reliability.md section 6): the
// bucket stream's leader is cut off from both other members while a
// client stays connected to it alone. Once the majority has elected a new
// leader and moved the id on (released by its holder a, claimed by b at
// the next epoch), the cut-off member still calls itself leader for 10 to
// 20 s and answers reads from its state. The client on it must not be told
// anything that state says: not that a still holds the id (owner, guard),
// nor a refusal decided on it (a claim refused as held by a). It may get
// no answer (an error) or the current one. Without read barriers each of
// the three answered from the deposed leader.
func TestStaleRead_DeposedBucketLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("elections take seconds")
	}
	rn := newRouteNet(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	all, err := client.Connect(rn.Cluster().URL(), client.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer all.Close()
	var w *client.World
	if !waitUntil(30*time.Second, func() bool {
		w, err = all.CreateWorld(ctx, "stale", world.Config{Replicas: 3, MinTTL: 10 * time.Millisecond})
		return err == nil
	}) {
		t.Fatalf("create world: %v", err)
	}
	kv := wire.BucketStream(w.Name)
	const id = "x"
	l, err := w.Ownership.Claim(ctx, id, "a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// The member to cut off leads both the bucket stream and the meta
	// group: a member that only leads the stream stops answering API
	// requests (10008) once it finds itself without a meta leader, 4 to
	// 9 s into the cut, which can come before the majority moved the id.
	meta := -1
	for i, n := range rn.Nodes {
		if n.JetStreamIsLeader() {
			meta = i
		}
	}
	if meta < 0 {
		t.Fatal("no meta leader")
	}
	old := -1
	if !waitUntil(30*time.Second, func() bool {
		if old = rn.leader(kv); old == meta {
			return true
		}
		if old >= 0 {
			body := fmt.Sprintf(`{"placement":{"preferred":%q}}`, rn.Nodes[meta].Name())
			if m, err := all.Conn().Request("$JS.API.STREAM.LEADER.STEPDOWN."+kv, []byte(body), 2*time.Second); err != nil {
				t.Logf("step down: %v", err)
			} else if strings.Contains(string(m.Data), `"error"`) {
				t.Logf("step down: %s", m.Data)
			}
			time.Sleep(500 * time.Millisecond)
		}
		return false
	}) {
		t.Fatalf("the bucket stream's leader (%d) is not the meta leader (%d)", old, meta)
	}
	// A client of the member that will be cut off, on it alone, with the
	// world open (and the record read once) before the cut.
	cut, err := client.Connect(rn.Nodes[old].ClientURL(), client.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cut.Close()
	wc, err := cut.World(ctx, w.Name)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := wc.Ownership.Owner(ctx, id); err != nil || !st.Held || st.Node != "a" {
		t.Fatalf("owner before the cut: %+v, %v", st, err)
	}
	// A client of the majority.
	var others []string
	for i, n := range rn.Nodes {
		if i != old {
			others = append(others, n.ClientURL())
		}
	}
	maj, err := client.Connect(others[0]+","+others[1], client.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer maj.Close()
	wm, err := maj.World(ctx, w.Name)
	if err != nil {
		t.Fatal(err)
	}

	rn.Isolate(old)
	defer rn.HealAll()
	if !waitUntil(40*time.Second, func() bool { return rn.leaderBesides(kv, old) >= 0 }) {
		t.Fatalf("the majority elected no bucket stream leader: %s", rn.routes())
	}
	var moved *ownership.Lease
	if !waitUntil(20*time.Second, func() bool {
		octx, ocancel := context.WithTimeout(ctx, 3*time.Second)
		defer ocancel()
		if err := wm.Ownership.Release(octx, id, "a"); err != nil && !errors.Is(err, ownership.ErrFree) {
			t.Logf("release on the majority: %v", err)
			return false
		}
		moved, err = wm.Ownership.Claim(octx, id, "b", time.Minute)
		if err != nil {
			t.Logf("claim on the majority: %v", err)
		}
		return err == nil
	}) {
		t.Fatal("the majority could not move the id on")
	}
	if moved.Epoch <= l.Epoch {
		t.Fatalf("claim by b at epoch %d after a's %d", moved.Epoch, l.Epoch)
	}
	deposed := rn.Nodes[old].JetStreamIsStreamLeader("$G", kv)
	t.Logf("id moved on to b at epoch %d; the cut-off member %s still calls itself leader: %v", moved.Epoch, rn.Nodes[old].Name(), deposed)
	if !deposed {
		t.Skip("the cut-off leader stepped down before the reads: nothing to show")
	}

	// The three calls at once, while the cut-off member still leads (each
	// may wait out its 2 s deadline for a barrier).
	var (
		wg                 sync.WaitGroup
		st                 ownership.Status
		errOwner, errGuard error
		errClaim           error
	)
	call := func(fn func(ctx context.Context)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			fn(c)
		}()
	}
	call(func(c context.Context) { st, errOwner = wc.Ownership.Owner(c, id) })
	call(func(c context.Context) { _, errGuard = wc.Ownership.Guard(c, id, "a", l.Epoch) })
	call(func(c context.Context) { _, errClaim = wc.Ownership.Claim(c, id, "c", time.Minute) })
	wg.Wait()

	stale := 0
	switch {
	case errOwner != nil:
		t.Logf("owner on the cut-off member: no answer (%v)", errOwner)
	case st.Held && st.Node == "a":
		stale++
		t.Errorf("owner on the cut-off member answered a's stale lease: %+v", st)
	case st.Node != "b" || st.Epoch != moved.Epoch:
		t.Errorf("owner on the cut-off member answered %+v, want b at epoch %d or no answer", st, moved.Epoch)
	}
	var fenced *ownership.FencedError
	var free *ownership.FreeError
	switch {
	case errGuard == nil:
		stale++
		t.Errorf("guard on the cut-off member says a still holds %q at epoch %d", id, l.Epoch)
	case errors.As(errGuard, &fenced) || errors.As(errGuard, &free):
		t.Logf("guard on the cut-off member refused with the current record: %v", errGuard)
	default:
		t.Logf("guard on the cut-off member: no answer (%v)", errGuard)
	}
	var held *ownership.HeldError
	switch {
	case errors.As(errClaim, &held) && held.Node == "a":
		stale++
		t.Errorf("claim on the cut-off member refused as held by a (stale): %v", errClaim)
	case errors.As(errClaim, &held) && held.Node == "b":
	case errClaim == nil:
		t.Errorf("claim by c on the cut-off member won over b's live lease")
	default:
		t.Logf("claim on the cut-off member: no answer (%v)", errClaim)
	}
	if stale > 0 {
		t.Logf("%d stale answers from the deposed leader", stale)
	}
}
