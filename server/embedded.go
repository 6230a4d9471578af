package server

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"syscall"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
)

// Config says how to run the embedded server. The zero value runs on random
// ports with a store in StoreDir (which must be set).
type Config struct {
	Name         string        // server name; required in a cluster
	Host         string        // client listen host; default 127.0.0.1
	Port         int           // client port; 0 or -1 picks a free one
	HTTPPort     int           // monitoring port; 0 disables, -1 picks one
	StoreDir     string        // JetStream store directory (required)
	SyncAlways   bool          // fsync every write (see docs/operations.md)
	SyncInterval time.Duration // fsync interval when not SyncAlways; 0 = server default (2 min)
	ConfigFile   string        // an optional nats-server config file; fields above override it

	// Cluster: a name, a listen port (-1 for a free one) and the routes to
	// the other members.
	ClusterName string
	ClusterHost string // cluster listen host; default: Host
	ClusterPort int
	Routes      []string

	// LameDuck, when positive, is how long LameDuckShutdown takes to close
	// the remaining client connections (after handing its Raft leaderships
	// to other members); LameDuckGrace is the wait before it starts closing
	// them. Zero: nats-server's defaults (2 min and 10 s).
	LameDuck      time.Duration
	LameDuckGrace time.Duration

	Log   bool // log the server's own lines to stderr
	Debug bool
	// Logger, when set, receives the server's own lines instead of stderr
	// (tests keep them to print when a test fails).
	Logger natsserver.Logger
	// Opts, when set, replaces everything above: full control for callers
	// that build nats-server options themselves.
	Opts *natsserver.Options
}

// Server is a running embedded nats-server.
type Server struct {
	*natsserver.Server
}

// ErrConfig wraps a bad server configuration.
var ErrConfig = errors.New("server: invalid config")

// ErrPortInUse: a port the server must listen on is taken (by another
// nats-server or fencepostd, most often). *PortInUseError names it.
var ErrPortInUse = errors.New("server: port in use")

// PortInUseError names the address that is taken and which listener
// wanted it ("client", "cluster", "monitoring").
type PortInUseError struct {
	Listener string
	Addr     string
	Err      error
}

func (e *PortInUseError) Error() string {
	return fmt.Sprintf("server: the %s port %s is in use (%v): another nats-server or fencepostd is listening there", e.Listener, e.Addr, e.Err)
}

// Is matches ErrPortInUse.
func (e *PortInUseError) Is(target error) bool { return target == ErrPortInUse }

// Unwrap gives the listen error.
func (e *PortInUseError) Unwrap() error { return e.Err }

// checkPorts fails at once if a fixed port of opts is taken: nats-server
// itself would only log the listen error and never become ready, and the
// caller would wait out its whole deadline to learn nothing. A port that
// another process takes between this check and the server's own listen
// still ends in the deadline; this check catches the common case.
func checkPorts(opts *natsserver.Options) error {
	for _, l := range []struct {
		name string
		host string
		port int
	}{{"client", opts.Host, opts.Port}, {"cluster", opts.Cluster.Host, opts.Cluster.Port}, {"monitoring", opts.HTTPHost, opts.HTTPPort}} {
		if l.port <= 0 {
			continue
		}
		addr := net.JoinHostPort(l.host, strconv.Itoa(l.port))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			if errors.Is(err, syscall.EADDRINUSE) {
				return &PortInUseError{Listener: l.name, Addr: addr, Err: err}
			}
			return fmt.Errorf("server: listen on %s (%s): %w", addr, l.name, err)
		}
		ln.Close()
	}
	return nil
}

// Options turns the config into nats-server options.
func (c Config) Options() (*natsserver.Options, error) {
	if c.Opts != nil {
		return c.Opts, nil
	}
	opts := &natsserver.Options{}
	if c.ConfigFile != "" {
		o, err := natsserver.ProcessConfigFile(c.ConfigFile)
		if err != nil {
			return nil, fmt.Errorf("%w: nats config %s: %v", ErrConfig, c.ConfigFile, err)
		}
		opts = o
	}
	if c.StoreDir == "" && opts.StoreDir == "" {
		return nil, fmt.Errorf("%w: store dir: empty; give a directory for JetStream's files", ErrConfig)
	}
	opts.JetStream = true
	opts.ServerName = firstNonEmpty(c.Name, opts.ServerName)
	opts.Host = firstNonEmpty(c.Host, opts.Host, "127.0.0.1")
	switch {
	case c.Port != 0:
		opts.Port = c.Port
	case opts.Port == 0:
		opts.Port = -1
	}
	if c.HTTPPort != 0 {
		opts.HTTPHost = opts.Host
		opts.HTTPPort = c.HTTPPort
	}
	opts.StoreDir = firstNonEmpty(c.StoreDir, opts.StoreDir)
	if c.SyncAlways {
		opts.SyncAlways = true
	}
	if c.SyncInterval > 0 {
		opts.SyncInterval = c.SyncInterval
	}
	if c.ClusterName != "" {
		opts.Cluster.Name = c.ClusterName
		opts.Cluster.Host = firstNonEmpty(c.ClusterHost, opts.Host)
		opts.Cluster.Port = c.ClusterPort
		var routes []*url.URL
		for _, r := range c.Routes {
			u, err := url.Parse(r)
			if err != nil {
				return nil, fmt.Errorf("%w: route %q: %v", ErrConfig, r, err)
			}
			routes = append(routes, u)
		}
		opts.Routes = routes
	}
	if c.LameDuck > 0 {
		opts.LameDuckDuration = c.LameDuck
		opts.LameDuckGracePeriod = c.LameDuckGrace
	}
	opts.NoLog = !c.Log
	opts.Debug = c.Debug
	opts.NoSigs = true
	return opts, nil
}

// Start runs an embedded server and waits until it accepts clients.
func Start(c Config) (*Server, error) {
	opts, err := c.Options()
	if err != nil {
		return nil, err
	}
	if err := checkPorts(opts); err != nil {
		return nil, err
	}
	ns, err := natsserver.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	switch {
	case c.Logger != nil:
		ns.SetLogger(c.Logger, c.Debug, false)
	case c.Log || c.Debug:
		ns.ConfigureLogger()
	}
	go ns.Start()
	if !ns.ReadyForConnections(30 * time.Second) {
		ns.Shutdown()
		return nil, errors.New("server: not ready for connections after 30s")
	}
	return &Server{Server: ns}, nil
}

// Stop shuts the server down and waits for it to finish.
func (s *Server) Stop() {
	s.Shutdown()
	s.WaitForShutdown()
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// ClusterReady says why the running members of a cluster are not ready
// for JetStream yet, or nil: every member current, one meta leader, and
// that leader has heard that every member is up. It places a new stream
// only on members it has heard from: until then a creation fails with
// "no suitable peers for placement, peer offline".
func ClusterReady(running []*Server) error {
	var leader *Server
	for _, s := range running {
		if !s.JetStreamIsCurrent() {
			return fmt.Errorf("%s: JetStream not current", s.Name())
		}
		if s.JetStreamIsLeader() {
			if leader != nil {
				return errors.New("two JetStream meta leaders")
			}
			leader = s
		}
	}
	if leader == nil {
		return errors.New("no JetStream meta leader")
	}
	if online := len(leader.JetStreamClusterPeers()); online != len(running) {
		return fmt.Errorf("the meta leader sees %d of %d members up", online, len(running))
	}
	return nil
}
