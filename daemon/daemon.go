package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/run"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencepost/fencepost/internal/inbox"
	"github.com/fencepost/fencepost/metrics"
	"github.com/fencepost/fencepost/server"
)

// Daemon is a started fencepostd: an embedded nats-server (or a connection
// to --nats), its own NATS connection, and the HTTP listener. Run runs it.
type Daemon struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics.Set
	gather  prometheus.Gatherer
	srv     *server.Server // nil with --nats
	unlock  func()         // drops the data dir lock; nil with --nats
	nc      *nats.Conn
	js      jetstream.JetStream
	httpL   net.Listener // nil with http=off
	http    *http.Server
	pprofL  net.Listener // nil without --pprof
	pprof   *http.Server

	worldReady atomic.Bool
	readyCh    chan struct{}   // closed when the world is ready
	stopCtx    context.Context // cancelled by stop: ends the background actors
	cancel     context.CancelFunc
	stopOnce   sync.Once
	ncClosed   chan struct{}

	memChecks   atomic.Int64 // memLoop's looks at the heap
	memReleases atomic.Int64 // and the idle heap it returned
	own         Creds        // with --auth: the operator's, for fencepostd's own connection
	accounts    []string     // with --auth: the public keys of the store's, producers' and owners' accounts
	marks       *epochMarks  // with --auth: the auditor's highest epochs, kept across its watches
	gate        *gate        // with --auth: the consumer gate
	writers     *writers     // with --auth: who wrote the records and state keys in flight (writers.go)
	feed        *recordFeed  // with --auth: the record writes the bucket stored (recordfeed.go)
	verdicts    *verdicts    // with --auth: the auditor's judgements of cursor writes (cursors.go)
}

// Option configures a Daemon.
type Option func(*Daemon)

// WithLogger sets the logger (default: slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(d *Daemon) { d.log = l } }

// WithMetrics sets the metric set the scrape publishes to and what /metrics
// serves (default: metrics.Default and metrics.Registry).
func WithMetrics(s *metrics.Set, g prometheus.Gatherer) Option {
	return func(d *Daemon) { d.metrics, d.gather = s, g }
}

// Start brings up the embedded server (unless cfg.NATS), connects to it and
// opens the HTTP listener. cfg must be complete (Parse, or WithDefaults and
// Validate). The world is made ready by Run, in the background, so that a
// cluster member can start before the others.
func Start(cfg Config, opts ...Option) (*Daemon, error) {
	d := &Daemon{cfg: cfg, log: slog.Default(), metrics: metrics.Default, gather: metrics.Registry, ncClosed: make(chan struct{}), readyCh: make(chan struct{})}
	for _, o := range opts {
		o(d)
	}
	d.stopCtx, d.cancel = context.WithCancel(context.Background())
	ok := false
	defer func() {
		if !ok {
			d.stop()
		}
	}()
	if err := d.startServer(); err != nil {
		return nil, err
	}
	if err := d.connect(); err != nil {
		return nil, err
	}
	if cfg.Auth && d.own.JWT != "" {
		if err := d.startGate(); err != nil {
			return nil, err
		}
		if err := d.startWriters(); err != nil {
			return nil, err
		}
		if err := d.startFeed(); err != nil {
			return nil, err
		}
	}
	if cfg.HTTP != "off" {
		l, err := net.Listen("tcp", cfg.HTTP)
		if err != nil {
			return nil, fmt.Errorf("http: listen on %s: %w", cfg.HTTP, err)
		}
		d.httpL = l
		d.http = &http.Server{Handler: d.mux(), ReadHeaderTimeout: 5 * time.Second}
		if cfg.Auth && cfg.natsMonitoring() {
			d.log.Warn(monitoringWarning, "addr", l.Addr().String(), "public", !loopback(cfg.HTTP), "http_public", cfg.HTTPPublic)
		}
	}
	if err := d.listenPProf(); err != nil {
		return nil, err
	}
	ok = true
	return d, nil
}

func (d *Daemon) startServer() error {
	if d.cfg.NATS != "" {
		return nil
	}
	c := d.cfg
	unlock, err := lockDataDir(c.DataDir)
	if err != nil {
		return err
	}
	d.unlock = unlock
	sc := server.Config{
		Name:        c.ServerName,
		Host:        c.Host,
		Port:        c.Port,
		StoreDir:    c.DataDir,
		SyncAlways:  c.Sync == SyncAlways,
		ConfigFile:  c.NATSConfig,
		ClusterName: c.ClusterName,
		Routes:      c.Routes,
		Log:         c.NATSLog,
	}
	if c.Sync == SyncInterval {
		sc.SyncInterval = time.Duration(c.SyncInterval)
	}
	if c.Cluster != "" {
		// A member that stops hands its leaderships over and moves its
		// clients to the others before it goes (lame duck mode).
		sc.LameDuck, sc.LameDuckGrace = lameDuck, lameDuckGrace
		host, port, _ := net.SplitHostPort(c.Cluster)
		sc.ClusterHost = host
		fmt.Sscan(port, &sc.ClusterPort)
	}
	if c.Auth {
		opts, err := sc.Options()
		if err != nil {
			return fmt.Errorf("embedded nats-server: %w", err)
		}
		tr, err := loadOrCreateTrust(c.DataDir, c.World, c.limits())
		if err != nil {
			return fmt.Errorf("auth: %w", err)
		}
		if err := tr.configure(opts); err != nil {
			return err
		}
		if err := d.checkFileMonitoring(opts); err != nil {
			return err
		}
		sc.Opts = opts
		if c.Creds == "" && c.User == "" {
			d.own = tr.own
		}
		d.accounts = tr.accountPubs()
		for _, n := range tr.notes {
			d.log.Warn("auth: "+n, "data_dir", c.DataDir)
		}
		d.log.Info("auth on: credentials written", "producer", CredsFile(c.DataDir, RoleProducer),
			"owner", CredsFile(c.DataDir, RoleOwner), "operator", CredsFile(c.DataDir, RoleOperator),
			"producer_inbox", tr.creds[RoleProducer].InboxPrefix(), "owner_inbox", tr.creds[RoleOwner].InboxPrefix())
	}
	srv, err := server.Start(sc)
	var inUse *server.PortInUseError
	if errors.As(err, &inUse) {
		flag := map[string]string{"client": "--port (or --host)", "cluster": "--cluster", "monitoring": "the monitoring port in --nats-config"}[inUse.Listener]
		return fmt.Errorf("embedded nats-server: %w; stop the other one, or change it with %s", err, flag)
	}
	if err != nil {
		return fmt.Errorf("embedded nats-server: %w", err)
	}
	d.srv = srv
	// Every account loaded now: the server applies a pushed account JWT
	// (creds revoke) only to an account it has loaded, and would read
	// the one of the start when it loads it later.
	for _, pub := range d.accounts {
		if _, err := srv.LookupAccount(pub); err != nil {
			return fmt.Errorf("auth: account %s: %w", pub, err)
		}
	}
	d.log.Info("nats-server ready", "url", srv.ClientURL(), "data_dir", c.DataDir, "sync", c.Sync,
		"sync_interval", time.Duration(c.SyncInterval), "cluster", c.Cluster, "server_name", srv.Name())
	return nil
}

// checkFileMonitoring refuses, with auth, nats-server's own monitoring
// listener from the nats-server config file (http, https, monitor_port)
// on a non-loopback address unless HTTPPublic accepts it, as Validate
// does for --http; and warns about it on any address.
func (d *Daemon) checkFileMonitoring(opts *natsserver.Options) error {
	port := max(opts.HTTPPort, opts.HTTPSPort)
	if opts.HTTPPort == 0 && opts.HTTPSPort == 0 {
		return nil
	}
	host := opts.HTTPHost
	if host == "" {
		host = opts.Host
	}
	addr := net.JoinHostPort(host, fmt.Sprint(port))
	if !loopback(addr) && !d.cfg.HTTPPublic {
		return fmt.Errorf("%w: auth: the nats-server config file %s serves nats-server's monitoring on %s, reachable from other machines, where it would show anyone, without credentials, every connection with its user JWT, every subscription and every stream; "+
			"remove it (fencepostd's --http serves the same endpoints), listen on 127.0.0.1, or give --http-public to accept it (docs/security.md)", server.ErrConfig, d.cfg.NATSConfig, addr)
	}
	d.log.Warn(monitoringWarning, "addr", addr, "from", d.cfg.NATSConfig, "public", !loopback(addr))
	return nil
}

// monitoringWarning is logged at start when nats-server's monitoring runs
// under --auth (docs/security.md, "Monitoring").
const monitoringWarning = "auth: nats-server's monitoring answers without credentials: whoever reaches it reads every connection with its user JWT (/connz?auth=true), every subscription (/subsz), streams and consumers (/jsz); keep it on loopback behind an authenticating proxy, or turn it off with --nats-monitoring=false (/metrics and the health checks stay)"

// connect opens fencepostd's own connection: in-process to the embedded
// server, or to --nats (retrying in the background while it is away).
func (d *Daemon) connect() error {
	c := d.cfg
	opts := []nats.Option{
		nats.Name("fencepostd"),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ClosedHandler(func(*nats.Conn) { close(d.ncClosed) }),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				d.log.Warn("NATS connection lost; reconnecting", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { d.log.Info("NATS connection back", "url", nc.ConnectedUrlRedacted()) }),
	}
	if c.Creds != "" {
		// The inbox the file's user may read its replies from, as
		// client.WithCreds does: without it every request would go
		// unanswered.
		prefix, err := inbox.FromCredsFile(c.Creds)
		if err != nil {
			return fmt.Errorf("--creds: %w", err)
		}
		opts = append(opts, nats.UserCredentials(c.Creds))
		if prefix != "" {
			opts = append(opts, nats.CustomInboxPrefix(prefix))
		}
	}
	if c.User != "" {
		opts = append(opts, nats.UserInfo(c.User, c.Password))
	}
	if d.own.JWT != "" {
		opts = append(opts, d.own.NATSOption())
	}
	if c.TLSCert != "" {
		opts = append(opts, nats.ClientCert(c.TLSCert, c.TLSKey))
	}
	if c.TLSCA != "" {
		opts = append(opts, nats.RootCAs(c.TLSCA))
	}
	url := c.NATS
	if d.srv != nil {
		// In-process: no socket, and no TLS even when the server requires
		// it for clients (nats.go would start TLS for a tls:// URL).
		url = "nats://" + strings.TrimPrefix(strings.TrimPrefix(d.srv.ClientURL(), "tls://"), "nats://")
		opts = append(opts, nats.InProcessServer(d.srv))
	} else {
		opts = append(opts, nats.RetryOnFailedConnect(true))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", url, err)
	}
	d.nc = nc
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(5*time.Second))
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	d.js = js
	return nil
}

// ClientURL is where NATS clients connect: the embedded server's client
// URL, or --nats.
func (d *Daemon) ClientURL() string {
	if d.srv != nil {
		return d.srv.ClientURL()
	}
	return d.cfg.NATS
}

// HTTPAddr is the address of the monitoring, /metrics and /healthz
// endpoint, or "" when it is off.
func (d *Daemon) HTTPAddr() string {
	if d.httpL == nil {
		return ""
	}
	return d.httpL.Addr().String()
}

// Server is the embedded server, or nil with --nats.
func (d *Daemon) Server() *server.Server { return d.srv }

// Lame duck timing of a cluster member's clean shutdown: leaderships are
// handed over first (about 1 s), then clients are told to move and, after
// the grace period, closed over the rest of the duration.
const (
	lameDuck      = 4 * time.Second
	lameDuckGrace = time.Second
)

// ErrServerStopped is returned by Run when the embedded server or the
// connection to --nats ended by itself.
var ErrServerStopped = errors.New("fencepostd: NATS stopped unexpectedly")

// ErrSelfFence is the error of an actor that gave up a lease because its
// authority lapsed (docs/contract.md section 5); fencepostd exits with code 3. No actor
// of this package holds leases yet: the code is reserved for those that
// will.
var ErrSelfFence = errors.New("fencepostd: self-fence")

// Run runs the daemon's actors until ctx ends (then it stops cleanly and
// returns nil) or one of them fails (it stops and returns that error). It
// returns only once everything it started has stopped.
func (d *Daemon) Run(ctx context.Context) error {
	var g run.Group
	g.Add(func() error {
		select {
		case <-ctx.Done():
			d.log.Info("shutting down", "cause", context.Cause(ctx))
			return nil
		case <-d.stopCtx.Done():
			return nil
		}
	}, func(error) { d.stop() })
	if d.srv != nil {
		g.Add(func() error {
			d.srv.WaitForShutdown()
			if d.stopCtx.Err() == nil {
				return fmt.Errorf("%w: the embedded nats-server shut down", ErrServerStopped)
			}
			return nil
		}, func(error) { d.stop() })
	}
	g.Add(func() error {
		<-d.ncClosed
		if d.stopCtx.Err() == nil {
			return fmt.Errorf("%w: fencepostd's NATS connection closed", ErrServerStopped)
		}
		return nil
	}, func(error) { d.stop() })
	if d.http != nil {
		g.Add(func() error {
			paths := "/metrics /healthz /readyz"
			if d.srv != nil && d.cfg.natsMonitoring() {
				paths += " /varz /jsz /connz /routez /subsz /healthz/nats"
			}
			d.log.Info("http ready", "addr", d.HTTPAddr(), "paths", paths)
			if err := d.http.Serve(d.httpL); !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("http: %w", err)
			}
			return nil
		}, func(error) { d.stop() })
	}
	if d.pprof != nil {
		g.Add(d.servePProf, func(error) { d.stop() })
	}
	g.Add(func() error { return d.ensureWorld(d.stopCtx) }, func(error) { d.stop() })
	g.Add(func() error { return d.purgeLoop(d.stopCtx) }, func(error) { d.stop() })
	g.Add(func() error { return d.sweepLoop(d.stopCtx) }, func(error) { d.stop() })
	if d.cfg.releaseMemory() {
		g.Add(func() error { return d.memLoop(d.stopCtx) }, func(error) { d.stop() })
	}
	if d.cfg.Auth && d.own.JWT != "" {
		// Under --auth, with fencepostd's own operator user: node owners
		// may not retire others' node leases, and the bucket is followed
		// for what permissions cannot refuse (docs/security.md).
		g.Add(func() error { return d.retireLoop(d.stopCtx) }, func(error) { d.stop() })
		g.Add(func() error { return d.auditLoop(d.stopCtx) }, func(error) { d.stop() })
		g.Add(func() error { return d.reapLoop(d.stopCtx) }, func(error) { d.stop() })
		g.Add(func() error { return d.gateLoop(d.stopCtx) }, func(error) { d.stop() })
		g.Add(func() error { return d.batchLoop(d.stopCtx) }, func(error) { d.stop() })
	}
	if d.http != nil { // nobody reads the scrape without the endpoint
		g.Add(func() error { return d.scrapeLoop(d.stopCtx) }, func(error) { d.stop() })
	}
	return g.Run()
}

// stop ends everything, once, in order: the HTTP endpoint and the
// background actors first, then fencepostd's connection (flushed), then
// the embedded server, which writes its stores out before it returns.
func (d *Daemon) stop() {
	d.stopOnce.Do(func() {
		d.cancel()
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(d.cfg.ShutdownTimeout))
		defer cancel()
		if d.http != nil {
			if err := d.http.Shutdown(ctx); err != nil {
				d.log.Warn("http shutdown", "err", err)
				d.http.Close()
			}
		} else if d.httpL != nil {
			d.httpL.Close()
		}
		if d.pprof != nil {
			d.pprof.Close()
		} else if d.pprofL != nil {
			d.pprofL.Close()
		}
		if d.nc != nil {
			if err := d.nc.FlushWithContext(ctx); err != nil && d.nc.IsConnected() {
				d.log.Warn("flush", "err", err)
			}
			d.nc.Close()
		} else {
			close(d.ncClosed)
		}
		if d.srv != nil {
			if d.cfg.Cluster != "" {
				d.log.Info("lame duck: handing over leaderships and clients", "within", lameDuck)
				d.srv.LameDuckShutdown()
			}
			d.srv.Stop()
			d.log.Info("nats-server stopped")
		}
		if d.unlock != nil {
			d.unlock() // after the store was written out
		}
	})
}

// Close stops a daemon that was started and not run. It is idempotent.
func (d *Daemon) Close() { d.stop() }
