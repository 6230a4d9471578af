package daemon_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/daemon"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/server/servertest"
	"github.com/fencepost/fencepost/shard"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/worker"
	"github.com/fencepost/fencepost/world"
)

// TestAuth_ShardedWorld: fencepostd --auth --shards 4 makes a sharded world
// whose committed mail the server removes (purge=server: owners may not
// purge). Two node owners' workers deliver every post of the producer once,
// each id's in order, with no permission refused; fencepostd's purger
// empties the mailbox behind their commits. A shard cursor an owner forges
// above the stream purges nothing, is repaired, and mail posted after it is
// delivered. A node owner drains a shard it claimed by hand. A state write
// of an id whose shard another node holds, in a batch fenced as that
// node's commit would be, is judged against the shard's holder.
func TestAuth_ShardedWorld(t *testing.T) {
	dir := t.TempDir()
	s := startDaemon(t, dir, "--auth", "--shards", "4")
	s.waitReady(t)
	a := &authed{started: s, dir: dir}
	ctx := testutil.Ctx(t, time.Minute)
	p := a.as(t, daemon.RoleProducer)
	op := a.as(t, daemon.RoleOperator)
	require.Equal(t, 4, op.w.Config.Shards)
	require.Equal(t, world.PurgeByServer, op.w.Config.Purge)

	var mu sync.Mutex
	got := map[string][]uint64{}
	handle := func(_ context.Context, m drain.Message) error {
		mu.Lock()
		defer mu.Unlock()
		got[m.ID] = append(got[m.ID], m.Seq)
		return nil
	}
	delivered := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, s := range got {
			n += len(s)
		}
		return n
	}
	owners := map[string]*roleConn{}
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, node := range []string{"node-a", "node-b"} {
		owners[node] = a.asFile(t, a.node(t, node).File)
		wk, err := owners[node].w.NewWorker(worker.Config{Node: node, TTL: 2 * time.Second}, handle)
		require.NoError(t, err)
		wg.Go(func() { assert.NoError(t, wk.Run(wctx)) }) // require would stop only this goroutine
	}
	want := map[string][]uint64{}
	post := func(id, body string) {
		ps, err := p.w.Send(ctx, id, []byte(body))
		require.NoError(t, err)
		want[id] = append(want[id], ps.Seq)
	}
	for r := range 4 {
		for i := range 50 {
			post(fmt.Sprint("id-", i), fmt.Sprint(r))
		}
	}
	mailbox := func() uint64 {
		mb, err := op.c.JetStream().Stream(ctx, wire.MailboxStream("default"))
		require.NoError(t, err)
		info, err := mb.Info(ctx)
		require.NoError(t, err)
		return info.State.Msgs
	}
	servertest.CheckFor(t, 30*time.Second, 50*time.Millisecond, func() error {
		if n, m := delivered(), mailbox(); n < 200 || m != 0 {
			return fmt.Errorf("delivered %d of 200, %d stored (want 0: fencepostd purges what the commits cover)", n, m)
		}
		return nil
	})

	// A forged cursor of shard 1, above the stream: nothing purged, and
	// shard 1's next posts are delivered.
	q1 := func(i int) bool { return wire.ShardOf(fmt.Sprint("id-", i), 4) == 1 }
	forged := []byte(`{"v":1,"seq":` + strconv.Itoa(int(mailbox())+1_000_000) + `}`)
	_, err := owners["node-a"].bucket(t).Put(ctx, wire.CursorKey(wire.ShardUnit(1)), forged)
	require.NoError(t, err, "admitted by the server: owners write cursors")
	a.waitMetricAtLeast(t, `fencepost_purger_forged_cursors_total{world="default"}`, 1)
	n := 0
	for i := range 50 {
		if q1(i) {
			post(fmt.Sprint("id-", i), "after")
			n++
		}
	}
	require.Positive(t, n)
	servertest.CheckFor(t, 30*time.Second, 50*time.Millisecond, func() error {
		if d := delivered(); d < 200+n {
			return fmt.Errorf("delivered %d of %d", d, 200+n)
		}
		return nil
	})
	stop()
	wg.Wait()
	mu.Lock()
	for id, seqs := range want {
		require.Equal(t, seqs, got[id], "id %s: each message once, in order", id)
	}
	mu.Unlock()

	// By hand: node-a claims id-0's shard and drains it.
	o := owners["node-a"]
	u, err := o.w.Unit("id-0")
	require.NoError(t, err)
	for range 3 {
		post("id-0", "by hand")
	}
	l, err := o.w.Ownership.Claim(ctx, u.Name, "node-a", 10*time.Second)
	require.NoError(t, err)
	res, err := shard.Drain(ctx, o.w.World, o.w.Ownership, o.w.Drainer, u.Shard, "node-a", l.Epoch, handle, shard.DrainOptions{})
	require.NoError(t, err)
	require.Equal(t, 3, res.Count)
	servertest.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		if m := mailbox(); m != 0 {
			return fmt.Errorf("%d stored after the drain by hand, want 0", m)
		}
		return nil
	})
	for _, r := range []*roleConn{p, owners["node-a"], owners["node-b"]} {
		require.Empty(t, r.violations(0), "no permission refused")
	}

	// State of an id whose shard node-b holds, written by node-a in a
	// batch fenced on the shard's record at its revision, as node-b's
	// commit would be: the auditor judges it against the shard's holder.
	other := "id-1"
	for i := 1; wire.ShardOf(other, 4) == u.Shard; i++ {
		other = fmt.Sprint("id-", i) // not node-a's shard
	}
	ub, err := owners["node-b"].w.Unit(other)
	require.NoError(t, err)
	lb, err := owners["node-b"].w.Ownership.Claim(ctx, ub.Name, "node-b", 10*time.Second)
	require.NoError(t, err)
	m := nats.NewMsg(wire.KeySubject("default", wire.StateKey(other, "count")))
	m.Data = []byte("1000000")
	lb.Fence.Apply(m)
	_, err = jsapi.PublishBatch(ctx, owners["node-a"].c.JetStream(), []*nats.Msg{m})
	require.NoError(t, err, "stored: fenced at the holder's revision")
	a.waitMetric(t, forgeries(daemon.ForgedStateNode), 1)
}
