// Command fencepostd runs fencepost's server side: an embedded nats-server
// with JetStream (or a connection to an existing NATS deployment) with the
// world "default" ready.
//
// With no flags: NATS clients on 127.0.0.1:4222, monitoring on
// 127.0.0.1:8222, file storage under ./data. SIGINT or SIGTERM stops it
// cleanly.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"syscall"
	"time"

	"github.com/oklog/run"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/server"
	"github.com/fencepost/fencepost/world"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

func main() { os.Exit(realMain(os.Args[1:])) }

func realMain(argv []string) int {
	fs := flag.NewFlagSet("fencepostd", flag.ContinueOnError)
	var (
		host     = fs.String("host", "127.0.0.1", "client listen host")
		port     = fs.Int("port", 4222, "client port")
		httpPort = fs.Int("http-port", 8222, "monitoring port (0 disables)")
		dataDir  = fs.String("data", "./data", "data directory")
		world0   = fs.String("world", "default", "world to create at start")
		logLevel = fs.String("log-level", envOr("FENCEPOST_LOG", "info"), "log level: debug, info, warn, error")
	)
	if err := fs.Parse(argv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintf(os.Stderr, "fencepostd: --log-level %q: use debug, info, warn or error\n", *logLevel)
		return exitUsage
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	srv, err := server.Start(server.Config{Host: *host, Port: *port, HTTPPort: *httpPort, StoreDir: *dataDir})
	if err != nil {
		log.Error("start embedded nats-server", "err", err)
		return exitError
	}
	defer srv.Stop()
	log.Info("nats-server ready", "url", srv.ClientURL(), "data", *dataDir)

	c, err := client.Connect(srv.ClientURL())
	if err != nil {
		log.Error("connect", "err", err)
		return exitError
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	if _, err := c.World(ctx, *world0); errors.Is(err, world.ErrUnknownWorld) {
		_, err = c.CreateWorld(ctx, *world0, world.Config{})
		if err != nil {
			cancel()
			log.Error("create world", "world", *world0, "err", err)
			return exitError
		}
		log.Info("world created", "world", *world0)
	} else if err != nil {
		cancel()
		log.Error("open world", "world", *world0, "err", err)
		return exitError
	}
	cancel()
	log.Info("fencepostd ready", "world", *world0)

	var g run.Group
	g.Add(run.SignalHandler(context.Background(), os.Interrupt, syscall.SIGTERM))
	g.Add(func() error {
		srv.WaitForShutdown()
		return errors.New("nats-server stopped")
	}, func(error) { srv.Shutdown() })
	err = g.Run()
	var sig *run.SignalError
	if errors.As(err, &sig) {
		log.Info("shutting down", "signal", sig.Signal.String())
		return exitOK
	}
	if err != nil {
		log.Error("stopped", "err", err)
		return exitError
	}
	return exitOK
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
