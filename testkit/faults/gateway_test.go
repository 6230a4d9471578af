package faults

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"sort"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/server"
	"github.com/fencepost/fencepost/server/servertest"
	"github.com/fencepost/fencepost/world"
)

// TestGateway_CostAcrossRegions measures what a client pays for a world
// in another cluster of a super-cluster (docs/operations.md section 8):
// two single-server clusters, east and west, joined by gateways that go
// through proxies delaying each direction by half of FP_GATEWAY_RTT. The
// world lives in east (created by a client of east, R1). The same
// operations are timed from a client of east and from a client of west.
// A measurement, not a check: it runs when FP_GATEWAY_RTT is set.
//
//	FP_GATEWAY_RTT=80ms go test -count=1 -v -run TestGateway_ ./testkit/faults/
func TestGateway_CostAcrossRegions(t *testing.T) {
	rtt, _ := time.ParseDuration(os.Getenv("FP_GATEWAY_RTT"))
	if rtt <= 0 {
		t.Skip("a measurement: FP_GATEWAY_RTT=80ms runs it")
	}
	names := []string{"east", "west"}
	ports := []int{freePort(t), freePort(t)}
	// proxies[i] carries i's outbound gateway connection to the other.
	var proxies []*Proxy
	for i := range names {
		p, err := NewProxy(fmt.Sprintf("127.0.0.1:%d", ports[1-i]))
		require.NoError(t, err)
		t.Cleanup(p.Close)
		p.SetLatency(rtt / 2)
		proxies = append(proxies, p)
	}
	nodes := make([]*servertest.Node, len(names))
	started := make(chan error, len(names))
	for i, name := range names {
		cfg := server.Config{Name: name, StoreDir: t.TempDir(), Port: -1}
		opts, err := cfg.Options()
		require.NoError(t, err)
		opts.Cluster.Name = name
		// A clustered JetStream needs configured routes: each cluster is
		// one server whose route points at itself (nats-server ignores a
		// connection to itself).
		cport := freePort(t)
		opts.Cluster.Host, opts.Cluster.Port = "127.0.0.1", cport
		self, err := url.Parse(fmt.Sprintf("nats://127.0.0.1:%d", cport))
		require.NoError(t, err)
		opts.Routes = []*url.URL{self}
		opts.Gateway.Name = name
		opts.Gateway.Host = "127.0.0.1"
		opts.Gateway.Port = ports[i]
		// The other side reaches this one through the other proxy, also
		// when it learns this gateway's address by gossip.
		opts.Gateway.Advertise = proxies[1-i].Addr()
		u, err := url.Parse("nats://" + proxies[i].Addr())
		require.NoError(t, err)
		opts.Gateway.Gateways = []*natsserver.RemoteGatewayOpts{{Name: names[1-i], URLs: []*url.URL{u}}}
		go func() { // both at once: each waits for the other's JetStream
			opts.NoLog = os.Getenv("FP_GATEWAY_LOG") == ""
			s, err := server.Start(server.Config{Opts: opts, Log: !opts.NoLog})
			if err == nil {
				nodes[i] = &servertest.Node{Server: s}
			}
			started <- err
		}()
	}
	for range names {
		require.NoError(t, <-started)
	}
	for _, n := range nodes {
		t.Cleanup(func() { n.Server.Stop() })
	}
	servertest.CheckFor(t, 30*time.Second, 50*time.Millisecond, func() error {
		for _, n := range nodes {
			if n.NumOutboundGateways() != 1 {
				return fmt.Errorf("%s: %d outbound gateways", n.Name(), n.NumOutboundGateways())
			}
			if !n.JetStreamIsCurrent() {
				return fmt.Errorf("%s: JetStream not current", n.Name())
			}
		}
		return nil
	})
	ctx := context.Background()
	var ws []*client.World
	for i, n := range nodes {
		var c *client.Client
		var err error
		servertest.CheckFor(t, 30*time.Second, 100*time.Millisecond, func() error {
			c, err = client.Connect(n.ClientURL(), client.WithLogger(quiet), client.WithTimeout(10*time.Second))
			return err
		})
		t.Cleanup(c.Close)
		var w *client.World
		servertest.CheckFor(t, 60*time.Second, 200*time.Millisecond, func() error {
			if i == 0 {
				w, err = c.CreateWorld(ctx, "geo", world.Config{MinTTL: 10 * time.Millisecond})
			} else {
				w, err = c.World(ctx, "geo")
			}
			return err
		})
		ws = append(ws, w)
	}
	p50 := func(ds []time.Duration) time.Duration {
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		return ds[len(ds)/2]
	}
	t.Logf("gateway RTT %v (each direction delayed %v); the world lives in east", rtt, rtt/2)
	for i, w := range ws {
		from := names[i]
		id := "geo-" + from
		var sends, claims, renews []time.Duration
		for n := 0; n < 50; n++ {
			start := time.Now()
			_, err := w.Queue.Send(ctx, id, []byte(fmt.Sprint(n)))
			require.NoError(t, err)
			sends = append(sends, time.Since(start))
		}
		for n := 0; n < 20; n++ {
			cid := fmt.Sprintf("c-%s-%d", from, n)
			start := time.Now()
			_, err := w.Ownership.Claim(ctx, cid, "n-"+from, time.Minute)
			require.NoError(t, err)
			claims = append(claims, time.Since(start))
			start = time.Now()
			_, err = w.Ownership.Renew(ctx, cid, "n-"+from, time.Minute)
			require.NoError(t, err)
			renews = append(renews, time.Since(start))
		}
		// Messages posted from east (quick), then drained from here.
		drainOf := func(n int) time.Duration {
			mid := fmt.Sprintf("%s-bulk-%d", id, n)
			for k := 0; k < n; k++ {
				_, err := ws[0].Queue.Send(ctx, mid, []byte(fmt.Sprint(k)))
				require.NoError(t, err)
			}
			l, err := w.Ownership.Claim(ctx, mid, "n-"+from, time.Minute)
			require.NoError(t, err)
			start := time.Now()
			res, err := w.Drainer.DrainLease(ctx, l, func(context.Context, drain.Message) error { return nil })
			require.NoError(t, err)
			require.Equal(t, n, res.Count)
			return time.Since(start)
		}
		d1, d2000 := drainOf(1), drainOf(2000)
		us := func(d time.Duration) string {
			return fmt.Sprintf("%v (%.1f RTT)", d.Round(10*time.Microsecond), float64(d)/float64(rtt))
		}
		t.Logf("client in %s: send p50 %s, claim p50 %s, renew p50 %s, drain of 1 message %s, of 2,000 messages %s",
			from, us(p50(sends)), us(p50(claims)), us(p50(renews)), us(d1), us(d2000))
	}
}
