package shard

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/fencepost/fencepost/fencing"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/world"
)

// TestAssigner_LateEventsOfEarlierEpochs: the ownership watch may show the
// claims and releases that came before this node's own claim of a shard
// after that claim returned (a handover: another node claimed at epoch 1,
// released, this one claimed at epoch 2). Such events must neither stop
// the holder nor mark the shard free; an event of a newer epoch stops it.
// Before, the late claim of epoch 1 stopped the holder of epoch 2 as
// "taken over", and the shard stayed held by this node with no holder:
// never delivered again (bench/scale, 4 workers, 64 shards).
func TestAssigner_LateEventsOfEarlierEpochs(t *testing.T) {
	wk := &Worker{w: &world.World{Name: "w", Config: world.Config{Shards: 4}}, cfg: Config{Node: "b"}, held: map[int]*holder{}, log: slog.New(slog.DiscardHandler)}
	a := &assigner{wk: wk, n: 4, free: map[int]time.Time{}, leases: map[int]*ownership.Lease{}, handing: map[int]bool{}}
	unit := wire.ShardUnit(2)
	l := &ownership.Lease{Fence: fencing.Fence{World: "w", ID: unit, Node: "b", Epoch: 2}}
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	h := &holder{ctx: ctx, cancel: cancel, log: wk.log}
	a.leases[2] = l
	wk.held[2] = h
	for _, ev := range []ownership.Event{
		{Kind: ownership.EventClaimed, ID: unit, Node: "a", Epoch: 1},
		{Kind: ownership.EventReleased, ID: unit, Node: "a", Epoch: 1},
		{Kind: ownership.EventClaimed, ID: unit, Node: "b", Epoch: 2},
	} {
		a.onEvent(ev)
		if ctx.Err() != nil {
			t.Fatalf("the holder of epoch 2 was stopped by %+v", ev)
		}
	}
	a.needLive = false           // no store here: keep the listing as it is
	a.step(context.Background()) // a free mark from the late release is dropped: the shard is held here
	if _, free := a.free[2]; free {
		t.Fatal("the shard held here is marked free")
	}
	a.onEvent(ownership.Event{Kind: ownership.EventSeized, ID: unit, Node: "c", Epoch: 3})
	if ctx.Err() == nil {
		t.Fatal("a seize at a newer epoch did not stop the holder")
	}
}
