package worker_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime/pprof"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/worker"
	"github.com/fencepost/fencepost/world"
)

// TestClusterFeed: workers on a replicated world, their consumers taken as
// data, while cluster members are stopped and restarted under them.
func TestClusterFeed(t *testing.T) {
	d, _ := time.ParseDuration(os.Getenv("FP_CLUSTER_FEED"))
	if d <= 0 {
		t.Skip("FP_CLUSTER_FEED=90s")
	}
	env := testutil.Start(t, testutil.Target{Name: "cluster", Cluster: true})
	w := env.World(t, world.Config{})
	ctx := testutil.Ctx(t, d+5*time.Minute)
	ids := make([]string, 16)
	for i := range ids {
		ids[i] = fmt.Sprint("id", i)
	}
	var mu sync.Mutex
	posted := map[string]map[uint64]bool{}
	got := map[string]map[uint64]int{}
	for _, id := range ids {
		posted[id], got[id] = map[uint64]bool{}, map[uint64]int{}
	}
	h := func(_ context.Context, m drain.Message) error {
		mu.Lock()
		got[m.ID][m.Seq]++
		mu.Unlock()
		return nil
	}
	type node struct {
		name string
		wk   atomic.Pointer[worker.Worker]
		stop context.CancelFunc
		done chan error
	}
	lf, err := os.Create("/tmp/cf-debug.log")
	require.NoError(t, err)
	defer lf.Close()
	dlog := slog.New(slog.NewTextHandler(lf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	start := func(name string) *node {
		c, err := client.Connect(env.URL, client.WithTimeout(5*time.Second))
		require.NoError(t, err)
		cw, err := c.World(ctx, w.Name)
		require.NoError(t, err)
		wk, err := cw.NewWorker(worker.Config{Node: name, TTL: time.Second, Log: dlog}, h)
		require.NoError(t, err)
		rctx, stop := context.WithCancel(ctx)
		nd := &node{name: name, stop: stop, done: make(chan error, 1)}
		nd.wk.Store(wk)
		go func() {
			for {
				err := wk.Run(rctx)
				if rctx.Err() != nil {
					nd.done <- err
					c.Close()
					return
				}
				t.Logf("%s: %v; again", name, err)
				wk, err = cw.NewWorker(worker.Config{Node: name, TTL: time.Second, Log: dlog}, h)
				if err != nil {
					nd.done <- err
					return
				}
				nd.wk.Store(wk)
			}
		}()
		return nd
	}
	nodes := []*node{start("n1"), start("n2"), start("n3")}
	pctx, stopPosts := context.WithCancel(ctx)
	var pwg sync.WaitGroup
	for p := range 4 {
		c, err := client.Connect(env.URL, client.WithTimeout(5*time.Second))
		require.NoError(t, err)
		defer c.Close()
		cw, err := c.World(ctx, w.Name)
		require.NoError(t, err)
		pwg.Go(func() {
			for i := 0; pctx.Err() == nil; i++ {
				id := ids[rand.IntN(len(ids))]
				sctx, cancel := context.WithTimeout(pctx, 5*time.Second)
				ps, err := cw.Queue.Send(sctx, id, []byte(fmt.Sprint(p, "-", i)))
				cancel()
				if err != nil {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				mu.Lock()
				posted[id][ps.Seq] = true
				mu.Unlock()
			}
		})
	}
	end := time.Now().Add(d)
	for k := 0; time.Now().Before(end); k++ {
		time.Sleep(time.Duration(1000+rand.IntN(1000)) * time.Millisecond)
		victim := env.Nodes.Nodes[rand.IntN(3)]
		t.Logf("stop %s", victim.Name())
		victim.Server.Stop()
		time.Sleep(time.Duration(500+rand.IntN(1000)) * time.Millisecond)
		victim.Restart(t)
		testutil.WaitFor(t, time.Minute, "member current", func() bool { return victim.JetStreamIsCurrent() })
	}
	stopPosts()
	pwg.Wait()
	missing := func() []string {
		mu.Lock()
		defer mu.Unlock()
		var out []string
		for id, seqs := range posted {
			for s := range seqs {
				if got[id][s] == 0 {
					out = append(out, fmt.Sprintf("%s@%d", id, s))
				}
			}
		}
		sort.Strings(out)
		return out
	}
	deadline := time.Now().Add(60 * time.Second)
	for len(missing()) > 0 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	if m := missing(); len(m) > 0 {
		if f, err := os.Create("/tmp/cf-goroutines.txt"); err == nil {
			_ = pprof.Lookup("goroutine").WriteTo(f, 2)
			f.Close()
		}
		// Where things stand for the ids with messages missing.
		byID := map[string]bool{}
		for _, s := range m {
			byID[s[:strings.Index(s, "@")]] = true
		}
		for id := range byID {
			st, err := w.Mailboxes.Stat(ctx, id)
			t.Logf("%s: stat %+v err %v", id, st, err)
			for _, n := range nodes {
				if wk := n.wk.Load(); wk != nil {
					t.Logf("%s: %s holds it: %v", id, n.name, slices.Contains(wk.Held(), id))
				}
			}
		}
	}
	for _, n := range nodes {
		n.stop()
		<-n.done
	}
	mu.Lock()
	total := 0
	for _, s := range posted {
		total += len(s)
	}
	mu.Unlock()
	m := missing()
	t.Logf("posted %d, missing %d", total, len(m))
	if len(m) > 0 {
		t.Errorf("lost: %v", m)
	}
}
