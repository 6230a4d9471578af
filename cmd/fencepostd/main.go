// Command fencepostd runs fencepost's server side: an embedded nats-server
// with JetStream (or a connection to an existing NATS deployment with
// --nats), the world "default" ready, Prometheus metrics, health checks and
// nats-server's monitoring on one HTTP endpoint.
//
// With no flags: NATS clients on 127.0.0.1:4222, monitoring, /metrics and
// /healthz on 127.0.0.1:8222, file storage under ./data. SIGINT or SIGTERM
// stops it cleanly. `fencepostd --help` lists the flags; --config FILE reads
// them from JSON (docs/operations.md); --version prints the version.
//
// `fencepostd creds add|ls|revoke` manages the credentials of a
// fencepostd --auth in its data dir (docs/security.md): an owner bound
// to one node, rotation before expiry, revocation of one node.
//
// Exit codes: 0 clean shutdown (a signal), 1 runtime error (the server
// could not start or stopped by itself), 2 bad flag or config file (its own
// or nats-server's), 3 self-fence
// (reserved for lease-holding work, docs/contract.md section 5).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/oklog/run"

	"github.com/fencepost/fencepost/daemon"
	"github.com/fencepost/fencepost/internal/buildinfo"
	"github.com/fencepost/fencepost/server"
)

// Exit codes (docs/operations.md).
const (
	exitOK        = 0
	exitError     = 1
	exitUsage     = 2
	exitSelfFence = 3
)

func main() { os.Exit(realMain(os.Args[1:])) }

func realMain(argv []string) int {
	if len(argv) > 0 && argv[0] == "creds" {
		return credsMain(argv[1:], os.Stdout, os.Stderr)
	}
	if wantsVersion(argv) {
		fmt.Printf("fencepostd %s (nats-server %s)\n", buildinfo.Version(), "v"+natsserver.VERSION)
		return exitOK
	}
	// Catch the signals before anything starts, so that one that comes
	// while the server starts stops it cleanly once it is up.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	cfg, err := daemon.Parse(argv, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "--version prints the version of fencepostd and of its nats-server, and exits")
		return exitOK
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err) // "fencepostd: invalid config: FIELD: ..."
		return exitUsage
	}
	log := daemon.NewLogger(cfg, os.Stderr)
	d, err := daemon.Start(cfg, daemon.WithLogger(log))
	if errors.Is(err, server.ErrConfig) { // the nats-server config file
		fmt.Fprintf(os.Stderr, "fencepostd: %v\n", err)
		return exitUsage
	}
	if err != nil {
		log.Error("start", "err", err)
		return exitError
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	var g run.Group
	g.Add(signalActor(sigs))
	g.Add(func() error { return d.Run(ctx) }, func(err error) { cancel(err) })
	err = g.Run()
	var sig *run.SignalError
	switch {
	case errors.As(err, &sig):
		log.Info("stopped", "signal", sig.Signal.String())
		return exitOK
	case errors.Is(err, daemon.ErrSelfFence):
		log.Error("SELF-FENCE: "+err.Error(), "err", err)
		return exitSelfFence
	case err != nil:
		log.Error("stopped", "err", err)
		return exitError
	}
	return exitOK
}

// wantsVersion: argv asks for the version (-version, --version, alone
// or among other flags), as fencepost --version does.
func wantsVersion(argv []string) bool {
	for _, a := range argv {
		switch a {
		case "--":
			return false
		case "-version", "--version", "-version=true", "--version=true":
			return true
		}
	}
	return false
}

// signalActor is run.SignalHandler on a channel subscribed earlier: it
// returns a *run.SignalError for the first signal.
func signalActor(sigs <-chan os.Signal) (func() error, func(error)) {
	done := make(chan struct{})
	return func() error {
			select {
			case sig := <-sigs:
				return &run.SignalError{Signal: sig}
			case <-done:
				return nil
			}
		}, func(error) {
			close(done)
		}
}
