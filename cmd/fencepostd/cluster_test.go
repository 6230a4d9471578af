package main_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/queue"
	"github.com/fencepost/fencepost/server/servertest"
	"github.com/fencepost/fencepost/world"
)

// proc is one fencepostd process of a test.
type proc struct {
	name   string
	args   []string
	cmd    *exec.Cmd
	logs   *syncBuffer
	exited chan error
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func startProc(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, args: args}
	p.start(t)
	return p
}

func (p *proc) start(t *testing.T) {
	t.Helper()
	p.cmd = exec.Command(bin, p.args...)
	p.logs = &syncBuffer{}
	p.cmd.Stderr = p.logs
	require.NoError(t, p.cmd.Start())
	p.exited = make(chan error, 1)
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() { _ = p.cmd.Process.Kill() })
}

// stop sends sig and returns the exit code.
func (p *proc) stop(t *testing.T, sig syscall.Signal) int {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(sig))
	select {
	case err := <-p.exited:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		require.NoError(t, err)
		return 0
	case <-time.After(30 * time.Second):
		t.Fatalf("%s still running 30s after %v; logs:\n%s", p.name, sig, p.logs.String())
		return -1
	}
}

// retry runs op until it succeeds, for at most 20 s: operations may fail
// while the cluster elects new leaders after a member died. Outcomes are not
// errors to retry; op decides what counts as done.
func retry(t *testing.T, what string, op func(ctx context.Context) error) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		err := op(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still failing after 20s: %v", what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// holding is what the test confirmed about an id: its holder and epoch.
type holding struct {
	node  string
	epoch uint64
}

// TestCluster_SurvivesSIGKILLOfOneMember runs three fencepostd processes as
// one NATS cluster with the default world at 3 replicas, posts and drains,
// kills the leader of the mailbox stream with SIGKILL, and then claims,
// renews, seizes, releases, guards, posts and drains again: every operation
// works on the two survivors, every posted message is drained, every
// confirmed ownership write is readable. The killed member then rejoins.
func TestCluster_SurvivesSIGKILLOfOneMember(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three processes")
	}
	const n = 3
	t0 := time.Now()
	phase := func(what string) { t.Logf("%6.2fs %s", time.Since(t0).Seconds(), what) }
	cport, rport := make([]int, n), make([]int, n)
	var routes []string
	for i := range n {
		cport[i], rport[i] = freePort(t), freePort(t)
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", rport[i]))
	}
	procs := make([]*proc, n)
	var urls []string
	for i := range n {
		name := fmt.Sprintf("fp-%d", i+1)
		procs[i] = startProc(t, name, "--server-name", name, "--port", fmt.Sprint(cport[i]), "--http", "off",
			"--data", t.TempDir(), "--cluster", fmt.Sprintf("127.0.0.1:%d", rport[i]),
			"--routes", strings.Join(routes, ","), "--log-level", "warn")
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", cport[i]))
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range procs {
				t.Logf("%s logs:\n%s", p.name, p.logs.String())
			}
		}
	})
	c, err := client.Connect(strings.Join(urls, ","), client.WithTimeout(3*time.Second),
		client.WithNATSOptions(nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.RetryOnFailedConnect(true)))
	require.NoError(t, err)
	defer c.Close()
	var w *client.World
	servertest.CheckFor(t, 40*time.Second, 100*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if w, err = c.World(ctx, "default"); err != nil {
			return err
		}
		return allCurrent(ctx, handles.Of(w).Mailbox, handles.Of(w).Bucket)
	})
	require.Equal(t, 3, w.Config.Replicas, "the default world of a cluster has 3 replicas")
	require.Zero(t, w.Config.Partitions, "and no partitions (world.PartitionsFor)")
	phase("cluster formed, world ready")

	posted := map[string]bool{} // bodies confirmed posted
	drained := map[string]bool{}
	held := map[string]holding{}
	ids := func(lo, hi int) []string {
		var out []string
		for i := lo; i < hi; i++ {
			out = append(out, fmt.Sprintf("order/%d", i))
		}
		return out
	}
	claim := func(id, node string) {
		retry(t, "claim "+id, func(ctx context.Context) error {
			l, err := w.Ownership.Claim(ctx, id, node, time.Minute)
			var h *ownership.HeldError
			switch {
			case err == nil:
				held[id] = holding{node, l.Epoch}
			case errors.As(err, &h) && h.Node == node: // an earlier try landed
				held[id] = holding{node, h.Epoch}
			default:
				return err
			}
			return nil
		})
	}
	send := func(id string, round int) {
		for k := range 5 {
			body := fmt.Sprintf("%s#%d.%d", id, round, k)
			retry(t, "send "+body, func(ctx context.Context) error {
				_, err := w.Queue.Send(ctx, id, []byte(body), queue.WithMsgID(body))
				return err
			})
			posted[body] = true
		}
	}
	drainAll := func(id string) {
		h := held[id]
		retry(t, "drain "+id, func(ctx context.Context) error {
			_, err := w.Drainer.Drain(ctx, id, h.node, h.epoch, func(_ context.Context, m drain.Message) error {
				drained[string(m.Body)] = true
				return nil
			})
			return err
		})
	}

	// Before the kill: 12 ids claimed, 5 messages each, half drained.
	for _, id := range ids(0, 12) {
		claim(id, "a")
		send(id, 1)
	}
	for _, id := range ids(0, 6) {
		drainAll(id)
	}

	// Kill the member that leads the mailbox stream: the worst one to lose.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	si, err := handles.Of(w).Mailbox.Info(ctx)
	cancel()
	require.NoError(t, err)
	victim := -1
	for i, p := range procs {
		if si.Cluster != nil && p.name == si.Cluster.Leader {
			victim = i
		}
	}
	require.GreaterOrEqual(t, victim, 0, "mailbox stream leader %v", si.Cluster)
	require.NoError(t, procs[victim].cmd.Process.Signal(syscall.SIGKILL))
	<-procs[victim].exited
	phase("killed " + procs[victim].name + " (mailbox stream leader)")

	// After the kill: every operation, on the two survivors.
	for i, id := range ids(0, 12) {
		switch i % 3 {
		case 0: // renew
			retry(t, "renew "+id, func(ctx context.Context) error {
				l, err := w.Ownership.Renew(ctx, id, "a", time.Minute)
				if err == nil {
					require.Equal(t, held[id].epoch, l.Epoch)
				}
				return err
			})
		case 1: // seize with force; the old epoch is then fenced
			old := held[id]
			retry(t, "seize "+id, func(ctx context.Context) error {
				l, err := w.Ownership.Seize(ctx, id, "b", time.Minute, true)
				if err == nil {
					held[id] = holding{"b", l.Epoch}
				}
				return err
			})
			require.Greater(t, held[id].epoch, old.epoch)
			retry(t, "guard "+id, func(ctx context.Context) error {
				_, err := w.Ownership.Guard(ctx, id, old.node, old.epoch)
				if errors.Is(err, ownership.ErrFenced) {
					return nil
				}
				return fmt.Errorf("guard of the seized epoch: %v, want fenced", err)
			})
		case 2: // release, then another node claims
			retry(t, "release "+id, func(ctx context.Context) error {
				err := w.Ownership.Release(ctx, id, "a")
				if errors.Is(err, ownership.ErrFree) {
					return nil // an earlier try landed
				}
				return err
			})
			old := held[id].epoch
			claim(id, "c")
			require.Greater(t, held[id].epoch, old)
		}
		send(id, 2)
		if i == 0 {
			phase("first renew and sends after the kill done")
		}
	}
	for _, id := range ids(12, 16) {
		claim(id, "d")
		send(id, 2)
	}
	for _, id := range ids(0, 16) {
		drainAll(id)
	}

	phase("operations after the kill done")
	// Nothing lost: every posted message was drained, every mailbox is
	// empty, and every confirmed holding is what the records say.
	require.Len(t, posted, 16*5+12*5)
	for body := range posted {
		require.True(t, drained[body], "posted %q was never delivered", body)
	}
	require.Equal(t, len(posted), len(drained), "nothing delivered that was not posted")
	retry(t, "inspect", func(ctx context.Context) error {
		info, err := world.Inspect(ctx, c.JetStream(), "default", world.InspectOptions{})
		if err != nil {
			return err
		}
		require.Zero(t, info.Depth, "every mailbox drained")
		rc, err := w.Ownership.CountRecords(ctx)
		if err != nil {
			return err
		}
		require.EqualValues(t, 16, rc.Records)
		return nil
	})
	for id, h := range held {
		retry(t, "owner "+id, func(ctx context.Context) error {
			st, err := w.Ownership.Owner(ctx, id)
			if err == nil {
				require.Equal(t, h.node, st.Node, id)
				require.Equal(t, h.epoch, st.Epoch, id)
			}
			return err
		})
	}

	// The killed member comes back on its store and catches up.
	phase("checked")
	procs[victim].start(t)
	servertest.CheckFor(t, 30*time.Second, 200*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return allCurrent(ctx, handles.Of(w).Mailbox, handles.Of(w).Bucket)
	})
	phase("killed member caught up")

	// A rolling restart: SIGTERM the mailbox stream leader while a sender
	// posts without pause. The member hands over (lame duck), exits 0 and
	// comes back; every message the sender saw posted is drained.
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	si, err = handles.Of(w).Mailbox.Info(ctx)
	cancel()
	require.NoError(t, err)
	leader := -1
	for i, p := range procs {
		if p.name == si.Cluster.Leader {
			leader = i
		}
	}
	require.GreaterOrEqual(t, leader, 0)
	stopSender := make(chan struct{})
	sent := make(chan []string, 1)
	var nSent atomic.Int64
	var slowest atomic.Int64 // the longest a post took, retries included
	go func() {
		var bodies []string
		defer func() { sent <- bodies }()
		for k := 0; k < 400; k++ {
			select {
			case <-stopSender:
				return
			default:
			}
			time.Sleep(10 * time.Millisecond) // at most 100 posts a second, 400 in all
			body := fmt.Sprintf("order/0#rolling.%d", k)
			start := time.Now()
			for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				_, err := w.Queue.Send(ctx, "order/0", []byte(body), queue.WithMsgID(body))
				cancel()
				if err == nil {
					bodies = append(bodies, body)
					nSent.Add(1)
					if d := int64(time.Since(start)); d > slowest.Load() {
						slowest.Store(d)
					}
					break
				}
			}
		}
	}()
	servertest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if nSent.Load() < 20 {
			return fmt.Errorf("%d posted", nSent.Load())
		}
		return nil
	})
	require.Equal(t, 0, procs[leader].stop(t, syscall.SIGTERM), "%s exit code; logs:\n%s", procs[leader].name, procs[leader].logs.String())
	phase("stopped " + procs[leader].name + " (mailbox stream leader) with SIGTERM")
	procs[leader].start(t)
	servertest.CheckFor(t, 30*time.Second, 200*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return allCurrent(ctx, handles.Of(w).Mailbox, handles.Of(w).Bucket)
	})
	after := nSent.Load()
	servertest.CheckFor(t, 20*time.Second, 10*time.Millisecond, func() error {
		if nSent.Load() < after+20 {
			return fmt.Errorf("%d posted since the restart", nSent.Load()-after)
		}
		return nil
	})
	close(stopSender)
	rolling := <-sent
	require.NotEmpty(t, rolling)
	for _, b := range rolling {
		posted[b] = true
	}
	drainAll("order/0")
	for _, b := range rolling {
		require.True(t, drained[b], "posted %q during the rolling restart was never delivered", b)
	}
	phase(fmt.Sprintf("rolling restart done: %d posted during it, all drained; slowest post %v", len(rolling), time.Duration(slowest.Load())))

	for _, p := range procs {
		require.Equal(t, 0, p.stop(t, syscall.SIGTERM), "%s exit code; logs:\n%s", p.name, p.logs.String())
	}
	phase("all stopped with SIGTERM")
}

// allCurrent says whether every replica of the streams is current.
func allCurrent(ctx context.Context, streams ...jetstream.Stream) error {
	for _, s := range streams {
		si, err := s.Info(ctx)
		if err != nil {
			return err
		}
		if si.Cluster == nil || si.Cluster.Leader == "" {
			return fmt.Errorf("%s: no leader", si.Config.Name)
		}
		if len(si.Cluster.Replicas) != si.Config.Replicas-1 {
			return fmt.Errorf("%s: %d followers, want %d", si.Config.Name, len(si.Cluster.Replicas), si.Config.Replicas-1)
		}
		for _, r := range si.Cluster.Replicas {
			if !r.Current || r.Offline {
				return fmt.Errorf("%s: replica %s not current", si.Config.Name, r.Name)
			}
		}
	}
	return nil
}
