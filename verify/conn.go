package verify

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/testkit/faults"
)

// Conn is how to reach the deployment: what the CLI's global flags say.
// It is handed to the owner processes too (on their stdin, never in
// their environment or arguments).
type Conn struct {
	URL string `json:"url"` // comma-separated for a cluster
	client.Access
	Timeout time.Duration `json:"timeout,omitempty"` // request timeout; default 5 s
	// TLSName is the server name TLS verifies when the URL is a local
	// proxy's (set by Run, not by the caller).
	TLSName string `json:"tls_name,omitempty"`
	// Proxied: the URL is Run's proxies; the client ignores the servers
	// the cluster advertises, so that it stays behind them.
	Proxied bool `json:"proxied,omitempty"`
}

// connect opens a client that reconnects for ever (a cut is a fault to
// ride out, not an end).
func (c Conn) connect(log *slog.Logger) (*client.Client, error) {
	timeout := c.Timeout
	if timeout == 0 {
		timeout = 5 * time.Second
	}
	opts := []nats.Option{nats.Timeout(timeout), nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond),
		nats.ReconnectJitter(10*time.Millisecond, 10*time.Millisecond)}
	if c.TLSName != "" {
		opts = append(opts, func(o *nats.Options) error {
			if o.TLSConfig == nil {
				o.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
			}
			o.TLSConfig.ServerName = c.TLSName
			return nil
		})
	}
	if c.Proxied {
		opts = append(opts, nats.IgnoreDiscoveredServers(), nats.DontRandomize())
	}
	return client.Connect(c.URL, client.WithAccess(c.Access), client.WithNATSOptions(opts...), client.WithTimeout(timeout), client.WithLogger(log))
}

// proxyTargets are the host:port addresses of the URLs, for the proxies
// of the cut fault: nats:// and tls:// URLs only (a websocket URL has a
// path and a host name that a plain TCP proxy would not carry).
func proxyTargets(urls string) ([]*url.URL, error) {
	var out []*url.URL
	for _, s := range strings.Split(urls, ",") {
		s = strings.TrimSpace(s)
		if !strings.Contains(s, "://") {
			s = "nats://" + s
		}
		u, err := url.Parse(s)
		if err != nil {
			return nil, fmt.Errorf("server URL %q: %v", s, err)
		}
		if u.Scheme != "nats" && u.Scheme != "tls" {
			return nil, fmt.Errorf("server URL %q: the cut fault proxies nats:// and tls:// URLs only; leave cut out of --faults", s)
		}
		if u.Port() == "" {
			u.Host = net.JoinHostPort(u.Hostname(), "4222")
		}
		out = append(out, u)
	}
	return out, nil
}

// proxies are the local TCP proxies of the cut fault, one per server URL.
type proxies []*faults.Proxy

// startProxies starts a proxy per URL of c and returns them with the Conn
// the clients under test use.
func startProxies(c Conn) (proxies, Conn, error) {
	targets, err := proxyTargets(c.URL)
	if err != nil {
		return nil, c, err
	}
	var ps proxies
	var urls []string
	for _, u := range targets {
		p, err := faults.NewProxy(u.Host)
		if err != nil {
			ps.close()
			return nil, c, err
		}
		ps = append(ps, p)
		pu := *u // the scheme and any user:password@ stay
		pu.Host = p.Addr()
		urls = append(urls, pu.String())
		if c.TLSName == "" && (u.Scheme == "tls" || c.TLSCA != "" || c.TLSCert != "") {
			c.TLSName = u.Hostname()
		}
	}
	c.URL, c.Proxied = strings.Join(urls, ","), true
	return ps, c, nil
}

// cut closes every connection through the proxies; it returns how many.
func (ps proxies) cut() int {
	n := 0
	for _, p := range ps {
		n += p.CutAll()
	}
	return n
}

func (ps proxies) close() {
	for _, p := range ps {
		p.Close()
	}
}
