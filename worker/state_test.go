package worker_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/worker"
	"github.com/fencepost/fencepost/world"
)

// TestState_CountersExactThroughTakeovers: state workers count each id's
// messages in its state while workers are killed (connection cut: their
// commits in flight end unknown), stopped, and their ids seized by force;
// at the end every id's counter is exactly the number of messages posted
// to it, though some messages were handed out more than once.
func TestState_CountersExactThroughTakeovers(t *testing.T) {
	for _, tg := range testutil.Targets() {
		t.Run(tg.Name, func(t *testing.T) { testCountersThroughTakeovers(t, tg) })
	}
}

func testCountersThroughTakeovers(t *testing.T, tg testutil.Target) {
	env := testutil.Start(t, tg)
	w := env.World(t, world.Config{})
	ctx := testutil.Ctx(t, 2*time.Minute)
	const ids, perID = 8, 150
	var mu sync.Mutex
	calls := 0
	count := func(_ context.Context, m drain.Message, st *drain.State) error {
		mu.Lock()
		calls++
		mu.Unlock()
		n := 0
		if v, ok := st.Get("count"); ok {
			n, _ = strconv.Atoi(string(v))
		}
		return st.Put("count", []byte(strconv.Itoa(n+1)))
	}
	type node struct {
		c    *client.Client
		stop context.CancelFunc
		done chan error
	}
	n := 0
	start := func() *node {
		n++
		c, err := client.Connect(env.URL)
		require.NoError(t, err)
		cw, err := c.World(ctx, w.Name)
		require.NoError(t, err)
		ttl := 500 * time.Millisecond
		if tg.Cluster {
			ttl = 2 * time.Second // R3 writes under -race on a shared 2-core machine
		}
		wk, err := cw.NewStateWorker(worker.Config{Node: fmt.Sprint("n", n), TTL: ttl}, count)
		require.NoError(t, err)
		rctx, stop := context.WithCancel(ctx)
		nd := &node{c: c, stop: stop, done: make(chan error, 1)}
		go func() { nd.done <- wk.Run(rctx) }()
		return nd
	}
	nodes := []*node{start(), start()}
	posted := make(chan struct{})
	go func() {
		defer close(posted)
		for i := range perID {
			for id := range ids {
				if _, err := w.Send(ctx, "acct-"+strconv.Itoa(id), []byte(strconv.Itoa(i))); err != nil {
					t.Errorf("send: %v", err)
					return
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	// Faults while the posts go on: a kill, a stop, forced seizes.
	for round := range 6 {
		time.Sleep(150 * time.Millisecond)
		victim := nodes[0]
		nodes = append(nodes[1:], start())
		switch round {
		case 1:
			victim.stop()
			<-victim.done
			victim.c.Close()
		default:
			victim.c.Close() // a crash: no release, commits in flight unknown
			victim.stop()
			<-victim.done
		}
		for id := range ids {
			if id%3 == round%3 {
				_, _ = w.Ownership.Seize(ctx, "acct-"+strconv.Itoa(id), "intruder", 300*time.Millisecond, true)
			}
		}
	}
	<-posted
	counts := func() (string, bool) {
		var sb strings.Builder
		all := true
		for id := range ids {
			st, err := w.Mailboxes.ReadState(ctx, "acct-"+strconv.Itoa(id))
			stat, serr := w.Mailboxes.Stat(ctx, "acct-"+strconv.Itoa(id))
			fmt.Fprintf(&sb, " acct-%d=%s(cursor %d, depth %d, %v %v)", id, st.Values["count"], st.Cursor, stat.Depth, err, serr)
			if err != nil || string(st.Values["count"]) != strconv.Itoa(perID) {
				all = false
			}
		}
		return sb.String(), all
	}
	// Liveness is not what this test checks: on a loaded machine (R3,
	// -race) workers may self-fence, which is safe; a fresh one is
	// started whenever the counters stop moving for 5 s.
	deadline := time.Now().Add(90 * time.Second)
	last, moved := "", time.Now()
	for {
		got, ok := counts()
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("counters not at their %d posts after 90 s:%s", perID, got)
		}
		if got != last {
			last, moved = got, time.Now()
		} else if time.Since(moved) > 5*time.Second {
			nodes = append(nodes, start())
			moved = time.Now()
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, nd := range nodes {
		nd.stop()
		<-nd.done
		nd.c.Close()
	}
	// Still exact once everything stopped: nothing counted twice late.
	for id := range ids {
		st, err := w.Mailboxes.ReadState(ctx, "acct-"+strconv.Itoa(id))
		require.NoError(t, err)
		require.Equal(t, strconv.Itoa(perID), string(st.Values["count"]), "acct-%d", id)
	}
	mu.Lock()
	t.Logf("%d messages, %d handler calls", ids*perID, calls)
	mu.Unlock()
}

// TestState_CountersExactThroughServerRestarts: state workers count each
// id's messages while the server restarts four times under them, each
// time while deliveries and their batches are in flight (answers lost,
// connections cut, batches whose commit the server may or may not have
// taken); every counter ends exact. Posts are made only while the server
// is up, so that each counts once. The last restart comes after the last
// posts. On a partitioned world (the default of fencepost world add,
// docs/design/partitions.md) a republished post lost with the server's
// connections, if any, has no later post to show it: only the
// reconnect's scan or a restarted worker's first scan would.
func TestState_CountersExactThroughServerRestarts(t *testing.T) {
	for _, partitions := range []int{0, world.DefaultPartitions} {
		t.Run(fmt.Sprintf("partitions=%d", partitions), func(t *testing.T) {
			countersExactThroughServerRestarts(t, partitions)
		})
	}
}

func countersExactThroughServerRestarts(t *testing.T, partitions int) {
	env := testutil.Start(t, testutil.Target{Name: "single"})
	w := env.World(t, world.Config{Partitions: partitions})
	ctx := testutil.Ctx(t, 3*time.Minute)
	const ids = 6
	posted := make([]int, ids)
	var mu sync.Mutex
	calls := 0
	count := func(_ context.Context, m drain.Message, st *drain.State) error {
		mu.Lock()
		calls++
		mu.Unlock()
		time.Sleep(3 * time.Millisecond) // a backlog: the restarts find work in flight
		n := 0
		if v, ok := st.Get("count"); ok {
			n, _ = strconv.Atoi(string(v))
		}
		return st.Put("count", []byte(strconv.Itoa(n+1)))
	}
	// Two workers, each started again whenever its Run ends (a self-fence
	// when the restart outlasts its ttl), until the test stops them.
	wctx, stopWorkers := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() {
			c, err := client.Connect(env.URL, client.WithTimeout(10*time.Second))
			if err != nil {
				t.Errorf("connect: %v", err)
				return
			}
			defer c.Close()
			for gen := 0; wctx.Err() == nil; gen++ {
				// The open is bounded on its own, as a supervisor would: a
				// request sent as the server restarts gets no answer, and
				// waited for the test's whole context (4 hangs in 137 runs
				// under load, and one CI failure, with every counter
				// stuck behind two workers that never started again).
				octx, cancel := context.WithTimeout(wctx, 10*time.Second)
				cw, err := c.World(octx, w.Name)
				cancel()
				if err == nil {
					var wk *worker.Worker
					wk, err = cw.NewStateWorker(worker.Config{Node: fmt.Sprintf("n%d-%d", i, gen), TTL: 2 * time.Second}, count)
					if err == nil {
						err = wk.Run(wctx)
					}
				}
				if wctx.Err() == nil {
					time.Sleep(100 * time.Millisecond)
				}
			}
		})
	}
	post := func(n int) {
		for k := range n {
			id := k % ids
			testutil.WaitFor(t, 30*time.Second, "a post", func() bool {
				_, err := w.Send(ctx, "acct-"+strconv.Itoa(id), []byte("x"))
				return err == nil
			})
			posted[id]++
		}
	}
	exact := func() bool {
		for id := range ids {
			st, err := w.Mailboxes.ReadState(ctx, "acct-"+strconv.Itoa(id))
			if err != nil || string(st.Values["count"]) != strconv.Itoa(posted[id]) {
				return false
			}
		}
		return true
	}
	for _, n := range []int{300, 300, 300, 120} {
		post(n)
		time.Sleep(20 * time.Millisecond) // deliveries and batches in flight
		env.Node.Restart(t)
		testutil.WaitWorld(t, env, w.Name)
	}
	testutil.WaitFor(t, 90*time.Second, "every counter at its posts", exact)
	stopWorkers()
	wg.Wait()
	require.True(t, exact(), "a counter moved after the workers stopped")
	mu.Lock()
	t.Logf("%d messages, %d handler calls", 3*300+120, calls)
	mu.Unlock()
}
