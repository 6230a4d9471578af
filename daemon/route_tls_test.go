package daemon_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/server/servertest"
	"github.com/fencepost/fencepost/testkit/testutil"
)

// TestDaemon_ClusterRoutesOverTLS: three fencepostd members whose
// nats-server config file puts the cluster routes on TLS, verified both
// ways against one CA. They form a cluster and serve the default world at
// 3 replicas: a message posted through one member is drained through
// another. A route port announces TLS and closes a plaintext route
// connection; a fourth member with plaintext routes does not join.
func TestDaemon_ClusterRoutesOverTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-member cluster")
	}
	dir := t.TempDir()
	p := testutil.WritePKI(t, dir)
	conf := p.RouteTLSConf(t, dir)
	const n = 3
	rport := make([]int, n)
	var routes []string
	for i := range n {
		rport[i] = freeTCPPort(t)
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", rport[i]))
	}
	members := make([]*started, n)
	for i := range n {
		members[i] = startDaemon(t, t.TempDir(), "--nats-config", conf, "--server-name", fmt.Sprintf("fp-%d", i+1),
			"--cluster", fmt.Sprintf("127.0.0.1:%d", rport[i]), "--routes", strings.Join(routes, ","))
	}
	for _, m := range members {
		servertest.CheckFor(t, 90*time.Second, 100*time.Millisecond, func() error {
			if code, body := m.get(t, "/readyz"); code != http.StatusOK {
				return fmt.Errorf("%s: readyz %d %s", m.d.Server().Name(), code, body)
			}
			return nil
		})
	}
	for i, m := range members {
		require.ElementsMatch(t, others(i, n), routeNames(t, m.d.Server().Server), "members of %s", m.d.Server().Name())
	}

	// The route port speaks TLS only, and wants a certificate of the CA:
	// a TLS dial with one reads the route INFO, a TLS dial without one
	// is refused, and plaintext CONNECT and PING get a closed connection.
	routeAddr := fmt.Sprintf("127.0.0.1:%d", rport[0])
	cert, err := tls.LoadX509KeyPair(p.ServerCert, p.ServerKey)
	require.NoError(t, err)
	info, err := readOverTLS(routeAddr, &tls.Config{RootCAs: pool(t, p.CA), Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	require.NoError(t, err)
	require.Contains(t, info, `"server_name":"fp-1"`)
	_, err = readOverTLS(routeAddr, &tls.Config{RootCAs: pool(t, p.CA), MinVersion: tls.VersionTLS12})
	require.Error(t, err, "a route without a client certificate")
	t.Logf("route TLS without a certificate: %v", err)
	conn, err := net.DialTimeout("tcp", routeAddr, 2*time.Second)
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
	_, err = fmt.Fprintf(conn, "CONNECT {\"verbose\":false,\"pedantic\":false,\"name\":\"plain\"}\r\nPING\r\n")
	require.NoError(t, err)
	rest, rerr := io.ReadAll(conn)
	t.Logf("plaintext route CONNECT answered %q, %v", rest, rerr)
	require.NotContains(t, string(rest), "PONG")
	require.False(t, errors.Is(rerr, os.ErrDeadlineExceeded), "the server closes a plaintext route connection at once")

	// The world is replicated over the TLS routes: post through fp-1,
	// drain through fp-3.
	ctx := testutil.Ctx(t, 60*time.Second)
	c1, err := client.Connect(members[0].d.ClientURL())
	require.NoError(t, err)
	defer c1.Close()
	c3, err := client.Connect(members[2].d.ClientURL())
	require.NoError(t, err)
	defer c3.Close()
	w1, err := c1.World(ctx, "default")
	require.NoError(t, err)
	require.Equal(t, 3, w1.Config.Replicas)
	_, err = w1.Queue.Send(ctx, "order/9", []byte("over tls routes"))
	require.NoError(t, err)
	w3, err := c3.World(ctx, "default")
	require.NoError(t, err)
	l, err := w3.Ownership.Claim(ctx, "order/9", "node-c", time.Minute)
	require.NoError(t, err)
	var got []string
	res, err := w3.Drainer.DrainLease(ctx, l, func(_ context.Context, m drain.Message) error {
		got = append(got, string(m.Body))
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, 1, res.Acked)
	require.Equal(t, []string{"over tls routes"}, got)

	// A member with plaintext routes to them does not join: for several
	// of its route retries (one a second) it has no route, and the TLS
	// members have none to it.
	plain := startDaemon(t, t.TempDir(), "--server-name", "fp-plain", "--cluster", fmt.Sprintf("127.0.0.1:%d", freeTCPPort(t)), "--routes", strings.Join(routes, ","))
	for deadline := time.Now().Add(4 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		require.Empty(t, routeNames(t, plain.d.Server().Server), "the plaintext member got a route")
		for _, m := range members {
			require.NotContains(t, routeNames(t, m.d.Server().Server), "fp-plain")
		}
	}
	code, _ := plain.get(t, "/readyz")
	require.NotEqual(t, http.StatusOK, code, "the plaintext member has no world")
}

// routeNames are the names of the servers s has routes to.
func routeNames(t *testing.T, s *natsserver.Server) []string {
	t.Helper()
	rz, err := s.Routez(nil)
	require.NoError(t, err)
	seen := map[string]bool{}
	var out []string
	for _, r := range rz.Routes {
		if r.RemoteName != "" && !seen[r.RemoteName] {
			seen[r.RemoteName] = true
			out = append(out, r.RemoteName)
		}
	}
	return out
}

// others are the names of the members but the i-th of n.
func others(i, n int) []string {
	var out []string
	for j := range n {
		if j != i {
			out = append(out, fmt.Sprintf("fp-%d", j+1))
		}
	}
	return out
}

func freeTCPPort(t testing.TB) int { return testutil.FreePort(t) }

// readOverTLS dials addr with TLS and returns the first line the server
// sends (a NATS INFO).
func readOverTLS(addr string, cfg *tls.Config) (string, error) {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return "", err
	}
	return bufio.NewReader(conn).ReadString('\n')
}
