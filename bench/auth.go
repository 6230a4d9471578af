package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/daemon"
	"github.com/fencepost/fencepost/metrics"
)

// authServer is the server of a run with Config.Auth: an in-process
// fencepostd --auth (daemon.Start, its store and credentials in a
// temporary directory) whose world is the run's, so that its retirer of
// lapsed node leases and its auditor follow the bench world, as they
// follow a deployment's. The parent connects as the operator (it creates
// the world and the raw stream, follows the bucket, force-seizes and
// drains at the end); the producers post with the producer role's
// credentials; each owner process gets credentials of its own, bound to
// its node (`fencepostd creds add --role owner --node N`).
type authServer struct {
	dir   string
	world string
	d     *daemon.Daemon
	stop  context.CancelFunc
	done  chan error // Run's result, once it was started
}

// startAuth starts the fencepostd --auth of a run on world w. Its actors
// (Run) start with run, once the bench created the world with its own
// settings.
func startAuth(w string, log *slog.Logger) (_ *authServer, err error) {
	dir, err := os.MkdirTemp("", "fencepost-bench-auth-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	cfg := daemon.Config{Port: -1, HTTP: "off", DataDir: dir, World: w, Auth: true}.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("bench: fencepostd --auth: %w", err)
	}
	reg := prometheus.NewRegistry()
	d, err := daemon.Start(cfg, daemon.WithLogger(log), daemon.WithMetrics(metrics.New(reg), reg))
	if err != nil {
		return nil, fmt.Errorf("bench: fencepostd --auth: %w", err)
	}
	return &authServer{dir: dir, world: w, d: d}, nil
}

// run starts fencepostd's actors: it opens the world the bench created
// and starts following it.
func (a *authServer) run() {
	if a.done != nil {
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	a.stop, a.done = stop, make(chan error, 1)
	go func() { a.done <- a.d.Run(ctx) }()
}

// close stops fencepostd and removes its directory.
func (a *authServer) close() error {
	var err error
	if a.done != nil {
		a.stop()
		select {
		case err = <-a.done:
		case <-time.After(45 * time.Second):
			err = errors.New("bench: fencepostd --auth did not stop within 45 s")
		}
	} else {
		a.d.Close()
	}
	os.RemoveAll(a.dir)
	return err
}

// url is the server's client URL.
func (a *authServer) url() string { return a.d.ClientURL() }

// inMsgs counts the messages clients sent the server.
func (a *authServer) inMsgs() int64 {
	v, err := a.d.Server().Varz(nil)
	if err != nil {
		return 0
	}
	return v.InMsgs
}

// roleCreds is the credentials file fencepostd wrote for role.
func (a *authServer) roleCreds(role string) string { return daemon.CredsFile(a.dir, role) }

// nodeCreds issues node's own owner credentials for the run's world and
// returns their file.
func (a *authServer) nodeCreds(node string) (string, error) {
	is, err := daemon.IssueCreds(a.dir, daemon.IssueRequest{Role: daemon.RoleOwner, Node: node, World: a.world})
	if err != nil {
		return "", fmt.Errorf("bench: credentials of node %s: %w", node, err)
	}
	return is.File, nil
}

// connect connects with the credentials file creds.
func (a *authServer) connect(creds string, log *slog.Logger) (*client.Client, error) {
	return client.Connect(a.url(), client.WithTimeout(30*time.Second), client.WithLogger(log), client.WithCreds(creds))
}

// producer opens the run's world as the producer role: for posting only.
func (a *authServer) producer(ctx context.Context, log *slog.Logger) (*client.Client, *client.World, error) {
	c, err := a.connect(a.roleCreds(daemon.RoleProducer), log)
	if err != nil {
		return nil, nil, fmt.Errorf("bench: connect as the producer: %w", err)
	}
	w, err := c.World(ctx, a.world)
	if err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("bench: open the world as the producer: %w", err)
	}
	return c, w, nil
}
