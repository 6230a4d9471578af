package faults

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/shard"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// TestShard_TakeoverRemovesCommittedMail is what the fault suite's
// counter-sharded scenario showed once (its final drain found mailboxes
// not empty after 60 s, every message delivered and counted): mail that a
// stored shard cursor covers, left stored by a holder that stopped before
// its next removal (taken over, crashed), is never removed by the next
// holder while the shard gets no new mail. docs/design.md 3.14 bounds
// committed-but-stored mail to about 250 ms of posts while a shard is
// served.
//
// Holder a (RemoveEvery an hour, so that only its first removal runs)
// delivers and commits three messages after its first removal; its
// shard is force-seized (it stops at once, as a crash would) and a is
// stopped; then b, with the defaults, takes the shard over. Nothing more
// is posted. The stored cursor covers every message, so b must remove the
// three within a few removal periods.
//
// It failed when a holder started with its removal bound at its stored
// cursor's Low (it removed only when its own cursor moved).
func TestShard_TakeoverRemovesCommittedMail(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{Shards: 1})
	ctx := testutil.Ctx(t, time.Minute)
	const id = "x"
	u, err := w.Unit(id)
	require.NoError(t, err)
	var mu sync.Mutex
	delivered := 0
	h := func(context.Context, drain.Message) error {
		mu.Lock()
		delivered++
		mu.Unlock()
		return nil
	}
	seen := func(n int) func() bool {
		return func() bool { mu.Lock(); defer mu.Unlock(); return delivered >= n }
	}
	stored := func(cursor, committedStored uint64) func() bool {
		return func() bool {
			st, err := w.Mailboxes.Stat(ctx, id)
			return err == nil && st.Cursor == cursor && st.CommittedStored == committedStored && st.Depth == 0
		}
	}

	p, err := w.Queue.Send(ctx, id, []byte("m1"))
	require.NoError(t, err)
	a, err := shard.New(w.World, w.Ownership, shard.Config{Node: "a", TTL: 2 * time.Second, RemoveEvery: time.Hour, Log: quiet}, h)
	require.NoError(t, err)
	actx, acancel := context.WithCancel(ctx)
	aDone := make(chan error, 1)
	go func() { aDone <- a.Run(actx) }()
	testutil.WaitFor(t, 10*time.Second, "a delivers, commits and removes m1", stored(p.Seq, 0))
	var last uint64
	for _, m := range []string{"m2", "m3", "m4"} {
		p, err := w.Queue.Send(ctx, id, []byte(m))
		require.NoError(t, err)
		last = p.Seq
	}
	testutil.WaitFor(t, 10*time.Second, "a delivers and commits m2..m4", stored(last, 3))
	require.True(t, seen(4)())

	// a stops without removing: its shard is force-seized, then a ends.
	_, err = w.Ownership.Seize(ctx, u.Name, "operator", time.Minute, true)
	require.NoError(t, err)
	testutil.WaitFor(t, 10*time.Second, "a lets the seized shard go", func() bool { return len(a.Held()) == 0 })
	acancel()
	require.NoError(t, <-aDone)
	require.NoError(t, w.Ownership.Release(ctx, u.Name, "operator"))

	b, err := shard.New(w.World, w.Ownership, shard.Config{Node: "b", TTL: 2 * time.Second, Log: quiet}, h)
	require.NoError(t, err)
	bctx, bcancel := context.WithCancel(ctx)
	bDone := make(chan error, 1)
	go func() { bDone <- b.Run(bctx) }()
	defer func() { bcancel(); require.NoError(t, <-bDone) }()
	testutil.WaitFor(t, 10*time.Second, "b holds the shard", func() bool { return len(b.Held()) == 1 })
	// b's removal runs every 250 ms: two seconds is eight of them.
	deadline := time.Now().Add(2 * time.Second)
	for !stored(last, 0)() {
		if time.Now().After(deadline) {
			st, err := w.Mailboxes.Stat(ctx, id)
			require.NoError(t, err)
			t.Fatalf("b has held the shard for 2 s and its stored cursor covers every message (cursor %d), yet %d committed messages are still stored (depth %d)", st.Cursor, st.CommittedStored, st.Depth)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
