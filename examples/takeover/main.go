// Command takeover shows a crash takeover against a running fencepostd
// (NATS_URL, default nats://127.0.0.1:4222): it posts 20 messages to one
// id, starts an owner as a child process, kills it with SIGKILL in the
// middle of its drain, and lets a standby take over once the dead owner's
// lease (1 s) lapses. It prints who delivered what, the duplicates (the
// message in flight at the crash), the lost messages (always 0) and the
// takeover gap.
//
//	go run ./examples/takeover
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/worker"
	"github.com/fencepost/fencepost/world"
)

const (
	worldName = "example-takeover"
	id        = "demo"
	total     = 20
	ttl       = time.Second
)

func main() {
	role := flag.String("role", "demo", "demo, or owner (the child process)")
	node := flag.String("node", "node-a", "node name of an owner")
	flag.Parse()
	url := os.Getenv("NATS_URL")
	if url == "" {
		url = "nats://127.0.0.1:4222"
	}
	c, err := client.Connect(url)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if *role == "owner" {
		owner(c, *node)
		return
	}
	if err := demo(c); err != nil {
		log.Fatal(err)
	}
}

// owner serves the world until it is killed, 50 ms per message.
func owner(c *client.Client, node string) {
	w, err := c.World(context.Background(), worldName)
	if err != nil {
		log.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	wk, err := w.NewWorker(worker.Config{Node: node, TTL: ttl, Log: quiet}, func(_ context.Context, m drain.Message) error {
		fmt.Printf("%s epoch=%d\n", m.Body, m.Fence.Epoch)
		time.Sleep(50 * time.Millisecond) // work
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(wk.Run(context.Background()))
}

func demo(c *client.Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, err := c.CreateWorld(ctx, worldName, world.Config{})
	if err != nil {
		return err
	}
	if err := c.ResetWorld(ctx, worldName); err != nil {
		return err
	}
	for i := range total {
		if _, err := w.Queue.Send(ctx, id, []byte(fmt.Sprintf("msg-%02d", i))); err != nil {
			return err
		}
	}
	fmt.Printf("posted %d messages to %q (nobody owns it yet)\n", total, id)

	self, err := os.Executable()
	if err != nil {
		return err
	}
	child := exec.Command(self, "--role", "owner", "--node", "node-a")
	child.Env = append(os.Environ(), "NATS_URL="+c.Conn().ConnectedUrl())
	out, err := child.StdoutPipe()
	if err != nil {
		return err
	}
	if err := child.Start(); err != nil {
		return err
	}
	byA := map[string]bool{}
	lines := bufio.NewScanner(out)
	for lines.Scan() && len(byA) < 5 {
		body, _, _ := strings.Cut(lines.Text(), " ")
		byA[body] = true
		fmt.Println("node-a delivered", lines.Text())
	}
	if err := child.Process.Kill(); err != nil {
		return err
	}
	killed := time.Now()
	_ = child.Wait()
	fmt.Println("node-a killed with SIGKILL in the middle of its drain")

	var (
		mu    sync.Mutex
		byB   = map[string]bool{}
		first time.Time
		done  = make(chan struct{})
	)
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	wk, err := w.NewWorker(worker.Config{Node: "node-b", TTL: ttl, Log: quiet}, func(_ context.Context, m drain.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if first.IsZero() {
			first = time.Now()
		}
		byB[string(m.Body)] = true
		fmt.Printf("node-b delivered %s epoch=%d\n", m.Body, m.Fence.Epoch)
		if len(byB) == total-len(byA) || all(byA, byB) {
			select {
			case <-done:
			default:
				close(done)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = wk.Run(wctx) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	stop()
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	lost, dup := 0, 0
	for i := range total {
		b := fmt.Sprintf("msg-%02d", i)
		if !byA[b] && !byB[b] {
			lost++
		}
		if byA[b] && byB[b] {
			dup++
		}
	}
	fmt.Printf("delivered: node-a %d, node-b %d; duplicates %d (delivered by node-a but not yet committed: a drain commits per batch); lost %d\n", len(byA), len(byB), dup, lost)
	fmt.Printf("takeover gap (kill to node-b's first delivery): %v with a %v lease\n", first.Sub(killed).Round(time.Millisecond), ttl)
	if lost > 0 {
		os.Exit(1)
	}
	return nil
}

func all(a, b map[string]bool) bool {
	for i := range total {
		m := fmt.Sprintf("msg-%02d", i)
		if !a[m] && !b[m] {
			return false
		}
	}
	return true
}
