// Package servertest starts embedded nats-servers for tests: a single node
// on random ports with a temporary store, and a 3-node JetStream cluster.
// Everything started is stopped by t.Cleanup.
package servertest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/server"
)

// Node is one embedded server of a test.
type Node struct {
	*server.Server
	cfg server.Config
}

// Warnings is what the node's server logged as warnings and errors so far
// (the newest 200 lines), for a test that checks the broker's own account
// of itself.
func (n *Node) Warnings() []string {
	l, ok := n.cfg.Logger.(*serverLog)
	if !ok {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

// New starts a single JetStream server on a random port with a store in
// t.TempDir().
func New(t testing.TB) *Node {
	t.Helper()
	cfg := server.Config{StoreDir: t.TempDir(), Port: -1}
	cfg.Logger = keepServerLog(t, "single")
	return start(t, cfg)
}

func start(t testing.TB, cfg server.Config) *Node {
	t.Helper()
	s, err := server.Start(cfg)
	if err != nil {
		t.Fatalf("servertest: start: %v", err)
	}
	return pin(t, s, cfg)
}

// pin makes the node of a started server, stopped by t.Cleanup.
func pin(t testing.TB, s *server.Server, cfg server.Config) *Node {
	n := &Node{Server: s, cfg: cfg}
	// Pin the ports so that Restart comes back where clients expect it.
	n.cfg.Port = s.Addr().(*net.TCPAddr).Port
	if cfg.ClusterName != "" {
		n.cfg.ClusterPort = s.ClusterAddr().Port
	}
	t.Cleanup(func() { n.Server.Stop() })
	return n
}

// Restart stops the server and starts it again on the same store and the
// same client port, as a restart of the process would.
func (n *Node) Restart(t testing.TB) {
	t.Helper()
	n.Server.Stop()
	cfg := n.cfg
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; {
		var s *server.Server
		if s, err = server.Start(cfg); err == nil {
			n.Server = s
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("servertest: restart: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Connect opens a client connection to url that retries while a server is
// restarting; it is closed by t.Cleanup.
func Connect(t testing.TB, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatalf("servertest: connect %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("servertest: jetstream: %v", err)
	}
	return nc, js
}

// Cluster is an in-process JetStream cluster.
type Cluster struct {
	Nodes []*Node
}

// NewCluster starts n servers that route to each other, and waits until the
// JetStream meta group has a leader.
func NewCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	c := &Cluster{}
	// The route ports are picked free, then closed, then bound by the
	// servers: in between the system may hand one out as the local port of
	// an outgoing connection, and that server never gets ready (seen once
	// in CI). Such a start is made again on new ports.
	for attempt := 1; ; attempt++ {
		nodes, err := startCluster(t, n)
		if err == nil {
			c.Nodes = nodes
			break
		}
		if attempt == 3 {
			t.Fatalf("servertest: cluster: %v", err)
		}
		t.Logf("servertest: cluster start failed (%v); again on new ports", err)
	}
	CheckFor(t, 20*time.Second, 50*time.Millisecond, func() error {
		running := make([]*server.Server, len(c.Nodes))
		for i, node := range c.Nodes {
			running[i] = node.Server
		}
		return server.ClusterReady(running)
	})
	return c
}

// startCluster starts n routed servers on new ports, or stops what it
// started and says why not.
func startCluster(t testing.TB, n int) ([]*Node, error) {
	ports := freePorts(t, n)
	var routes []string
	for _, p := range ports {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	var nodes []*Node
	for i := 0; i < n; i++ {
		cfg := server.Config{
			Name:        fmt.Sprintf("fp-%d", i+1),
			StoreDir:    t.TempDir(),
			Port:        -1,
			ClusterName: "fencepost-test",
			ClusterPort: ports[i],
			Routes:      routes,
		}
		cfg.Logger = keepServerLog(t, cfg.Name)
		s, err := server.Start(cfg)
		if err != nil {
			for _, node := range nodes {
				node.Server.Stop()
			}
			return nil, err
		}
		nodes = append(nodes, pin(t, s, cfg))
	}
	return nodes, nil
}

// URL is a client URL naming every node, for clients that fail over. It
// is made from the pinned ports, not from the running servers: a node's
// Restart replaces its server while other goroutines ask for the URL.
func (c *Cluster) URL() string {
	u := ""
	for i, n := range c.Nodes {
		if i > 0 {
			u += ","
		}
		u += n.URL()
	}
	return u
}

// URL is the node's client URL, on its pinned port (the same across
// Restart). A Node made by hand around a started server (Node{Server: s},
// as the partition tests do) has no pinned port and no Restart: its
// server's URL.
func (n *Node) URL() string {
	if n.cfg.Port == 0 {
		return n.ClientURL()
	}
	host := n.cfg.Host
	if host == "" {
		host = "127.0.0.1"
	}
	return fmt.Sprintf("nats://%s:%d", host, n.cfg.Port)
}

func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var ports []int
	var ls []net.Listener
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("servertest: free port: %v", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

// CheckFor polls fn every `every` until it returns nil, and fails the test
// with fn's last error after total.
func CheckFor(t testing.TB, total, every time.Duration, fn func() error) {
	t.Helper()
	deadline := time.Now().Add(total)
	for {
		err := fn()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("servertest: condition not met after %v: %v", total, err)
		}
		time.Sleep(every)
	}
}

// StopStreamLeader stops the member that leads stream s and returns it
// (Restart brings it back), and a member that stays.
func (c *Cluster) StopStreamLeader(t testing.TB, s jetstream.Stream) (stopped, stays *Node) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatalf("servertest: stream info: %v", err)
	}
	for _, n := range c.Nodes {
		if info.Cluster != nil && n.Name() == info.Cluster.Leader {
			stopped = n
		} else if stays == nil {
			stays = n
		}
	}
	if stopped == nil {
		t.Fatalf("servertest: stream %s has no leader: %+v", info.Config.Name, info.Cluster)
	}
	stopped.Server.Stop()
	return stopped, stays
}

// CreateStream creates a stream on the cluster, trying again while the
// meta leader does not know every peer yet (JetStream's "no suitable
// peers for placement", 10005: right after the cluster started, an R3
// placement fails until it does).
func CreateStream(t testing.TB, js jetstream.JetStream, cfg jetstream.StreamConfig) jetstream.Stream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		s, err := js.CreateStream(ctx, cfg)
		if err == nil {
			return s
		}
		var api *jetstream.APIError
		if !errors.As(err, &api) || api.ErrorCode != 10005 || ctx.Err() != nil {
			t.Fatalf("servertest: create stream %s: %v", cfg.Name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
