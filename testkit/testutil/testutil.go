// Package testutil has helpers shared by the test suites: a world on an
// embedded server (single node, or a 3-node cluster with R3) in one call.
package testutil

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/server/servertest"
	"github.com/fencepost/fencepost/world"
)

// Target is where a suite runs: a single embedded node or a 3-node cluster.
type Target struct {
	Name    string
	Cluster bool
}

// Targets are the deployments every suite runs against. FENCEPOST_TEST_CLUSTER=0
// skips the cluster (for quick local runs); CI runs both.
func Targets() []Target {
	t := []Target{{Name: "single"}}
	if os.Getenv("FENCEPOST_TEST_CLUSTER") != "0" {
		t = append(t, Target{Name: "cluster-R3", Cluster: true})
	}
	return t
}

// Env is a running deployment and a client connected to it.
type Env struct {
	Client *client.Client
	URL    string
	Node   *servertest.Node    // single node, or nil
	Nodes  *servertest.Cluster // cluster, or nil
}

// Start brings up the target's servers and a client.
func Start(t testing.TB, tg Target) *Env {
	t.Helper()
	e := &Env{}
	if tg.Cluster {
		e.Nodes = servertest.NewCluster(t, 3)
		e.URL = e.Nodes.URL()
	} else {
		e.Node = servertest.New(t)
		e.URL = e.Node.ClientURL()
	}
	c, err := client.Connect(e.URL, client.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	e.Client = c
	return e
}

var worldSeq atomic.Int64

// errNoSuitablePeers is JetStream's "no suitable peers for placement".
const errNoSuitablePeers jetstream.ErrorCode = 10005

// World creates a fresh world with short test ttls (MinTTL 10ms) and the
// replicas the target needs; cfg fields that are set override the test
// defaults.
func (e *Env) World(t testing.TB, cfg world.Config) *client.World {
	t.Helper()
	if cfg.MinTTL == 0 {
		cfg.MinTTL = 10 * time.Millisecond
	}
	if cfg.Replicas == 0 && e.Nodes != nil {
		cfg.Replicas = 3
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name := fmt.Sprintf("t%d", worldSeq.Add(1))
	for {
		w, err := e.Client.CreateWorld(ctx, name, cfg)
		if err == nil {
			return w
		}
		// A cluster that just elected its meta leader may not know every
		// peer yet: R3 placement fails until it does.
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && apiErr.ErrorCode == errNoSuitablePeers {
			if ctx.Err() == nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
		}
		t.Fatalf("create world %s: %v", name, err)
	}
}

// Ctx is a context that ends with the test (or after d).
func Ctx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// WaitWorld polls until the world answers again (after a restart).
func WaitWorld(t testing.TB, e *Env, name string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := e.Client.World(ctx, name)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("world %s did not come back: %v", name, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// WaitFor polls fn every few milliseconds until it returns true, and fails
// the test with what after total.
func WaitFor(t testing.TB, total time.Duration, what string, fn func() bool) {
	t.Helper()
	deadline := time.Now().Add(total)
	for !fn() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", total, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
