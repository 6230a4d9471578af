package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/world"
)

// oursSide posts through the client and drains with workers.
type oursSide struct {
	cli func(args ...string) *exec.Cmd
	// bare: the server is a plain one (--bare), and the world is made
	// here; otherwise fencepostd makes it, with its flags (--shards), and
	// the side waits for it.
	bare bool
	// shards: the world made here (--bare) is sharded.
	shards int
}

func (s oursSide) ready(ctx context.Context, url string) error {
	c, err := client.Connect(url, client.WithTimeout(5*time.Second))
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.World(ctx, "default")
	if errors.Is(err, world.ErrUnknownWorld) && s.bare {
		// A plain server (--bare): the world fencepostd would make. (Not
		// otherwise: fencepostd makes it with its own flags, and a world
		// made here first would keep its kind.)
		_, err = c.CreateWorld(ctx, "default", world.Config{Shards: s.shards})
	}
	return err
}

func (oursSide) post(ctx context.Context, url string, cfg config) error {
	c, err := client.Connect(url, client.WithTimeout(time.Minute))
	if err != nil {
		return err
	}
	defer c.Close()
	w, err := c.World(ctx, "default")
	if err != nil {
		return err
	}
	body := make([]byte, cfg.body)
	return inFlight(ctx, cfg.ids, func(i int) (func() error, error) {
		p, err := w.Queue.SendAsync(idOf(i), body)
		if err != nil {
			return nil, err
		}
		return func() error { _, err := p.Wait(ctx); return err }, nil
	})
}

// hold claims the first cfg.hold ids through cfg.workers sessions (node
// leases, as workers hold ids: one record write per id, renewals per
// node), spread round robin, and keeps them until release, which closes
// the sessions (every id free at once). The sessions renew through the
// restart (a ttl of 30 s outlasts it; the client reconnects).
func (oursSide) hold(ctx context.Context, url string, cfg config) (func(), error) {
	if cfg.hold == 0 {
		return func() {}, nil
	}
	c, err := client.Connect(url, client.WithTimeout(time.Minute), client.WithNATSOptions(nats.MaxReconnects(-1)))
	if err != nil {
		return nil, err
	}
	w, err := c.World(ctx, "default")
	if err != nil {
		c.Close()
		return nil, err
	}
	var sessions []*ownership.Session
	release := func() {
		for _, ss := range sessions {
			cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_ = ss.CloseContext(cctx)
			cancel()
		}
		sessions = nil
		c.Close()
	}
	for n := range cfg.workers {
		ss, err := w.Ownership.OpenSession(ctx, fmt.Sprintf("holder-%d", n+1), 30*time.Second)
		if err != nil {
			release()
			return nil, err
		}
		sessions = append(sessions, ss)
	}
	// 32 claims at a time (a worker's bound, worker.maxClaims).
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	sem := make(chan struct{}, 32)
	for i := 0; i < cfg.hold && failed.Load() == nil && ctx.Err() == nil; i++ {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if _, err := sessions[i%len(sessions)].Claim(ctx, idOf(i)); err != nil {
				failed.CompareAndSwap(nil, &err)
			}
		})
	}
	wg.Wait()
	if p := failed.Load(); p != nil {
		err = *p
	} else {
		err = ctx.Err()
	}
	if err != nil {
		release()
		return nil, err
	}
	var once sync.Once
	return func() { once.Do(release) }, nil
}

// stat times `fencepost stat` of the world, as a user runs it.
func (s oursSide) stat(ctx context.Context) (time.Duration, error) {
	t0 := time.Now()
	out, err := s.cli("stat", "--json").CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("%w: %s", err, out)
	}
	return time.Since(t0), nil
}

func (oursSide) drain(ctx context.Context, url string, cfg config) error {
	if cfg.cpuProfile != "" {
		stop, err := profileCPU(cfg.cpuProfile)
		if err != nil {
			return err
		}
		defer stop()
	}
	var got atomic.Int64
	done := make(chan struct{})
	var once sync.Once
	ctx, cancel := context.WithCancel(ctx)
	var running sync.WaitGroup
	errs := make(chan error, cfg.workers)
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	defer func() {
		// The workers stop (and release their node leases) before their
		// connections close.
		cancel()
		running.Wait()
	}()
	for n := range cfg.workers {
		c, err := client.Connect(url, client.WithTimeout(time.Minute))
		if err != nil {
			return err
		}
		w, err := c.World(ctx, "default")
		if err != nil {
			c.Close()
			return err
		}
		wk, err := w.NewWorker(client.WorkerConfig{Node: fmt.Sprintf("scale-%d", n+1), Log: quiet}, func(context.Context, client.Message) error {
			if got.Add(1) == int64(cfg.ids) {
				once.Do(func() { close(done) })
			}
			return nil
		})
		if err != nil {
			c.Close()
			return err
		}
		running.Go(func() {
			defer c.Close()
			if err := wk.Run(ctx); err != nil && ctx.Err() == nil {
				errs <- err
			}
		})
	}
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			fmt.Fprintf(os.Stderr, "drain: %d of %d delivered\n", got.Load(), cfg.ids)
			continue
		case <-done:
			return nil
		case err := <-errs:
			return fmt.Errorf("a worker stopped with %d of %d delivered: %w", got.Load(), cfg.ids, err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// rawSide is plain JetStream: one stream of the same subjects.
type rawSide struct{}

const rawStream = "RAW"

func (rawSide) connect(url string) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(url)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

func (r rawSide) ready(ctx context.Context, url string) error {
	nc, js, err := r.connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	_, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: rawStream, Subjects: []string{"raw.box.*"}, Storage: jetstream.FileStorage})
	return err
}

func (r rawSide) post(ctx context.Context, url string, cfg config) error {
	nc, js, err := r.connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	body := make([]byte, cfg.body)
	return inFlight(ctx, cfg.ids, func(i int) (func() error, error) {
		f, err := js.PublishAsync("raw.box."+idOf(i), body)
		if err != nil {
			return nil, err
		}
		return func() error {
			select {
			case <-f.Ok():
				return nil
			case err := <-f.Err():
				return err
			case <-ctx.Done():
				return ctx.Err()
			}
		}, nil
	})
}

func (rawSide) stat(context.Context) (time.Duration, error) { return 0, nil }

func (rawSide) hold(context.Context, string, config) (func(), error) { return func() {}, nil }

func (r rawSide) drain(ctx context.Context, url string, cfg config) error {
	nc, js, err := r.connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	cons, err := js.CreateOrUpdateConsumer(ctx, rawStream, jetstream.ConsumerConfig{Durable: "drain", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 10_000})
	if err != nil {
		return err
	}
	var got atomic.Int64
	var wg sync.WaitGroup
	for range cfg.workers {
		wg.Go(func() {
			for got.Load() < int64(cfg.ids) && ctx.Err() == nil {
				batch, err := cons.Fetch(500, jetstream.FetchMaxWait(time.Second))
				if err != nil {
					continue
				}
				for m := range batch.Messages() {
					if m.Ack() == nil {
						got.Add(1)
					}
				}
			}
		})
	}
	wg.Wait()
	if n := got.Load(); n < int64(cfg.ids) {
		return fmt.Errorf("%d of %d drained", n, cfg.ids)
	}
	return nil
}

// inFlight runs send for 0..n-1 with at most 2,000 outcomes outstanding:
// below nats.go's 4,000 asynchronous publishes awaiting their ack, past
// which a publish waits 200 ms and then fails (on a loaded machine a
// million posts with a window of 4,096 failed so).
func inFlight(ctx context.Context, n int, send func(i int) (func() error, error)) error {
	const window = 2000
	waits := make([]func() error, 0, window)
	flush := func() error {
		for _, w := range waits {
			if err := w(); err != nil {
				return err
			}
		}
		waits = waits[:0]
		return nil
	}
	for i := range n {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		w, err := send(i)
		if err != nil {
			return err
		}
		if waits = append(waits, w); len(waits) == window {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// idOf is the i-th id: "u-" and a number, as a mailbox per user.
func idOf(i int) string { return "u-" + strconv.Itoa(i) }
