package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/server"
)

// cluster is an embedded cluster of routed nats-servers in this process,
// each with its store in a directory of its own under dir. A member can be
// killed (shut down without handing its Raft leaderships over: what its
// peers see of a crash) and started again on the same ports and store.
type cluster struct {
	mu    sync.Mutex
	cfgs  []server.Config
	nodes []*server.Server // nil while a member is down
	gone  int64            // client messages counted by members before they were killed
}

// startCluster starts n members and waits until JetStream has a meta
// leader and every member is current.
func startCluster(dir string, n int) (*cluster, error) {
	ports, err := freePorts(2 * n)
	if err != nil {
		return nil, err
	}
	var routes []string
	for i := range n {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", ports[n+i]))
	}
	c := &cluster{}
	for i := range n {
		cfg := server.Config{
			Name:        fmt.Sprintf("bench-%d", i+1),
			StoreDir:    filepath.Join(dir, fmt.Sprintf("n%d", i+1)),
			Port:        ports[i],
			ClusterName: "fencepost-bench",
			ClusterPort: ports[n+i],
			Routes:      routes,
		}
		if err := os.MkdirAll(cfg.StoreDir, 0o700); err != nil {
			c.stop()
			return nil, err
		}
		s, err := server.Start(cfg)
		if err != nil {
			c.stop()
			return nil, fmt.Errorf("bench: cluster member %s: %w", cfg.Name, err)
		}
		c.cfgs, c.nodes = append(c.cfgs, cfg), append(c.nodes, s)
	}
	if err := c.waitCurrent(30 * time.Second); err != nil {
		c.stop()
		return nil, err
	}
	return c, nil
}

// freePorts picks n free local ports (closed again before the servers bind
// them; a clash fails the start, which says so).
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("bench: a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// url names every member, for clients that fail over.
func (c *cluster) url() string {
	var us []string
	for _, cfg := range c.cfgs {
		us = append(us, fmt.Sprintf("nats://127.0.0.1:%d", cfg.Port))
	}
	return strings.Join(us, ",")
}

// inMsgs is the messages clients sent the members since they started
// (each client's message is counted once, by the member it is connected
// to: routed copies are not client messages).
func (c *cluster) inMsgs() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.gone
	for _, s := range c.nodes {
		n += clientMsgs(s)
	}
	return n
}

func clientMsgs(s *server.Server) int64 {
	if s == nil {
		return 0
	}
	v, err := s.Varz(nil)
	if err != nil {
		return 0
	}
	return v.InClientMsgs
}

// kill shuts the named member down, not in lame-duck mode: it hands no
// leadership over, so its peers elect new leaders as after a crash.
func (c *cluster) kill(name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, cfg := range c.cfgs {
		if cfg.Name == name && c.nodes[i] != nil {
			c.gone += clientMsgs(c.nodes[i])
			c.nodes[i].Shutdown()
			c.nodes[i].WaitForShutdown()
			c.nodes[i] = nil
			return nil
		}
	}
	return fmt.Errorf("bench: no running cluster member %q", name)
}

// restart starts every member that is down again, and waits until all are
// current.
func (c *cluster) restart(wait time.Duration) error {
	c.mu.Lock()
	for i, cfg := range c.cfgs {
		if c.nodes[i] != nil {
			continue
		}
		s, err := server.Start(cfg)
		if err != nil {
			c.mu.Unlock()
			return fmt.Errorf("bench: restart %s: %w", cfg.Name, err)
		}
		c.nodes[i] = s
	}
	c.mu.Unlock()
	return c.waitCurrent(wait)
}

// waitCurrent waits until one member is the JetStream meta leader and every
// running member is current.
func (c *cluster) waitCurrent(wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		err := c.current()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: cluster not ready after %v: %w", wait, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *cluster) current() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var running []*server.Server
	for _, s := range c.nodes {
		if s != nil {
			running = append(running, s)
		}
	}
	return server.ClusterReady(running)
}

// stop shuts every running member down.
func (c *cluster) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, s := range c.nodes {
		if s != nil {
			s.Shutdown()
			s.WaitForShutdown()
			c.nodes[i] = nil
		}
	}
}

// leaderKill is one stream leader killed during a round.
type leaderKill struct {
	what string    // "mailbox", "bucket" or "stream" (raw)
	node string    // the member that was killed
	at   time.Time // when
}

// killLeaders kills, during a round of d, the leader of each stream that
// leaders names in turn, at even spacing, and starts the member again
// before the next kill (a 3-member cluster keeps its quorum). leader
// answers the current leader of a stream. Each kill is reported to killed.
func (c *cluster) killLeaders(ctx context.Context, start time.Time, d time.Duration, streams []string, leader func(ctx context.Context, what string) (string, error), killed func(leaderKill)) error {
	slot := d / time.Duration(2*len(streams)+1)
	for i, what := range streams {
		at := start.Add(slot * time.Duration(2*i+1))
		if !sleepUntil(ctx, at) {
			return nil
		}
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		node, err := leader(lctx, what)
		cancel()
		if err != nil {
			return fmt.Errorf("bench: the %s stream's leader: %w", what, err)
		}
		k := leaderKill{what: what, node: node, at: time.Now()}
		if err := c.kill(node); err != nil {
			return err
		}
		killed(k)
		sleepUntil(ctx, at.Add(slot))
		if err := c.restart(30 * time.Second); err != nil {
			return err
		}
	}
	return nil
}

// sleepUntil waits until t or ctx's end, and says whether t came first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	tm := time.NewTimer(time.Until(t))
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// The streams whose leaders a run kills, by their role.
const (
	streamMailbox = "mailbox" // the world's mailboxes
	streamBucket  = "bucket"  // the world's bucket: records, cursors
	streamRaw     = "raw"     // the raw side's one stream
)

// killLeaders makes the side kill, beside each round's posting, the
// leaders of its streams in the roles given, in turn, and measure the
// stall each kill causes.
func (r *runner) killLeaders(c *client.Client, cl *cluster, roles []string) {
	r.s.stalls = &stallMeter{}
	leader := func(ctx context.Context, role string) (string, error) {
		st, err := c.JetStream().Stream(ctx, r.streams[role])
		if err != nil {
			return "", err
		}
		info := st.CachedInfo()
		if info.Cluster == nil || info.Cluster.Leader == "" {
			return "", fmt.Errorf("stream %s has no leader", r.streams[role])
		}
		return info.Cluster.Leader, nil
	}
	before := r.during
	r.during = func(ctx context.Context, start time.Time, d time.Duration) {
		var wg sync.WaitGroup
		if before != nil {
			wg.Go(func() { before(ctx, start, d) })
		}
		err := cl.killLeaders(ctx, start, d, roles, leader, func(k leaderKill) { r.s.stalls.killed(r.s.name, r.s.start, k) })
		if err != nil {
			select {
			case r.errs <- err:
			default:
			}
		}
		wg.Wait()
	}
}
