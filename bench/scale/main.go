// Command scale measures what idle mailboxes cost (issue 18, section 1):
// N ids with one message each, posted to fencepostd's default world, beside
// a plain JetStream server (the same embedded nats-server, no fencepost)
// holding the same messages in one stream. For each side it reports the
// server process's RSS after posting, the store's size on disk, the time
// from a restart to the first answer (fencepostd: a world `fencepost stat`;
// raw: a stream info), RSS after that restart, and the time 4 workers take
// to drain everything (fencepost workers on node leases; raw: 4 pullers of
// one consumer with acks).
//
//	go run ./bench/scale --ids 1000000
//
// It builds fencepostd and fencepost into a temporary directory and runs
// the servers as processes of their own, so that RSS is the server's
// alone. Nothing here is part of the product.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	httppprof "net/http/pprof"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/server"
	"github.com/fencepost/fencepost/world"
)

// rawServeArg makes this program a plain JetStream server (the raw side):
// scale <rawServeArg> DIR PORT.
const rawServeArg = "__raw-serve"

func main() {
	if len(os.Args) == 4 && os.Args[1] == rawServeArg {
		if err := rawServe(os.Args[2], os.Args[3]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	ids := flag.Int("ids", 200_000, "ids, one message each")
	body := flag.Int("body", 128, "message body bytes")
	workers := flag.Int("workers", 4, "workers that drain at the end")
	settle := flag.Duration("settle", 10*time.Second, "wait after posting and after a restart before RSS is read")
	asJSON := flag.Bool("json", false, "print the figures as one JSON object")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of this process (the workers) during fencepost's drain to FILE")
	daemonFlags := flag.String("fencepostd-flags", "", "more flags for fencepostd, space-separated (e.g. --scrape-records=false)")
	noDrain := flag.Bool("no-drain", false, "skip the drains")
	hold := flag.Int("hold", 0, "after posting, hold this many of the ids (the first ones) through the node leases of --workers sessions, until the drain (issue 18's variant: 100,000 ids held by 4 workers); RSS, disk and restart are then measured with them held")
	bare := flag.Bool("bare", false, "run fencepost's side on a plain server too (no fencepostd: the world made by the client), to profile the server (FP_SCALE_SERVER_PROFILE=FILE)")
	daemonEnv := flag.String("fencepostd-env", "", "more environment for fencepostd, space-separated (e.g. GOMEMLIMIT=100MiB)")
	late := flag.Duration("late", 0, "also read RSS this long after the restart's reading (after the stat), to see what stays")
	heapProfile := flag.String("heapprofile", "", "write each server's heap profile after posting and after the restart (after the settle) to PREFIX-{post,restart}.pb.gz (fencepostd, through its --pprof) and PREFIX-raw-*.pb.gz, with runtime.MemStats in PREFIX-*.txt")
	flag.Parse()
	cfg := config{ids: *ids, body: *body, workers: *workers, settle: *settle, cpuProfile: *cpuProfile, late: *late, heapProfile: *heapProfile, daemonFlags: strings.Fields(*daemonFlags), daemonEnv: strings.Fields(*daemonEnv), bare: *bare, noDrain: *noDrain, hold: *hold}
	if cfg.hold < 0 || cfg.hold > cfg.ids || (cfg.hold > 0 && cfg.workers < 1) {
		fmt.Fprintln(os.Stderr, "scale: --hold must be between 0 and --ids, with at least one worker")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := run(ctx, cfg)
	// What was measured is printed also when a step failed.
	if *asJSON {
		_ = json.NewEncoder(os.Stdout).Encode(rep)
	} else {
		rep.print()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(1)
	}
}

type config struct {
	ids, body, workers int
	settle, late       time.Duration
	cpuProfile         string
	heapProfile        string
	daemonFlags        []string
	daemonEnv          []string
	bare               bool
	noDrain            bool
	hold               int
}

// side is one server's figures.
type side struct {
	PostSeconds    float64 `json:"post_s"`
	RSSAfterPostMB float64 `json:"rss_after_post_mb"`
	DiskMB         float64 `json:"disk_mb"`
	RestartSeconds float64 `json:"restart_s"` // process start to first answer
	RSSRestartMB   float64 `json:"rss_after_restart_mb"`
	PeakRestartMB  float64 `json:"rss_peak_restart_mb"`             // the highest RSS from the restart to that reading (VmHWM)
	HeapPostMB     float64 `json:"heap_after_post_mb,omitempty"`    // Go heap in use right after a collection (--heapprofile)
	HeapRestartMB  float64 `json:"heap_after_restart_mb,omitempty"` // the same after the restart
	RSSStatMB      float64 `json:"rss_after_stat_mb,omitempty"`
	RSSLateMB      float64 `json:"rss_late_mb,omitempty"` // --late after the restart's reading
	StatSeconds    float64 `json:"stat_s,omitempty"`      // a world stat after the restart (fencepost)
	DrainSeconds   float64 `json:"drain_s"`
	DrainCPU       float64 `json:"drain_server_cpu_s"` // the server process's CPU time during the drain
	RSSDrainMB     float64 `json:"rss_after_drain_mb"`
}

type report struct {
	IDs     int        `json:"ids"`
	Body    int        `json:"body_bytes"`
	Workers int        `json:"workers"`
	Held    int        `json:"held,omitempty"` // ids held (--hold) while RSS, disk and restart were measured
	Ours    side       `json:"fencepost"`
	Raw     side       `json:"raw"`
	EmptyMB [2]float64 `json:"rss_empty_mb"` // fencepostd, raw
}

func (r report) print() {
	fmt.Printf("%d ids x 1 message of %d B; drained by %d workers\n", r.IDs, r.Body, r.Workers)
	if r.Held > 0 {
		fmt.Printf("%d of them held by %d workers' node leases while RSS, disk and restart were measured\n", r.Held, r.Workers)
	}
	fmt.Println()
	fmt.Printf("%-34s %12s %12s %9s\n", "", "fencepostd", "raw", "ours/raw")
	row := func(name string, o, w float64) {
		ratio := ""
		if w > 0 {
			ratio = fmt.Sprintf("%.2fx", o/w)
		}
		fmt.Printf("%-34s %12.2f %12.2f %9s\n", name, o, w, ratio)
	}
	row("RSS empty, MB", r.EmptyMB[0], r.EmptyMB[1])
	row("post, s", r.Ours.PostSeconds, r.Raw.PostSeconds)
	row("RSS after posting, MB", r.Ours.RSSAfterPostMB, r.Raw.RSSAfterPostMB)
	row("store on disk, MB", r.Ours.DiskMB, r.Raw.DiskMB)
	row("restart to first answer, s", r.Ours.RestartSeconds, r.Raw.RestartSeconds)
	row("RSS after restart, MB", r.Ours.RSSRestartMB, r.Raw.RSSRestartMB)
	row("peak RSS since the restart, MB", r.Ours.PeakRestartMB, r.Raw.PeakRestartMB)
	if r.Ours.HeapRestartMB > 0 {
		row("Go heap after posting, MB", r.Ours.HeapPostMB, r.Raw.HeapPostMB)
		row("Go heap after restart, MB", r.Ours.HeapRestartMB, r.Raw.HeapRestartMB)
	}
	row("world stat after restart, s", r.Ours.StatSeconds, 0)
	row("RSS after that stat, MB", r.Ours.RSSStatMB, 0)
	if r.Ours.RSSLateMB > 0 {
		row("RSS --late after the restart, MB", r.Ours.RSSLateMB, r.Raw.RSSLateMB)
	}
	row("drain all, s", r.Ours.DrainSeconds, r.Raw.DrainSeconds)
	row("server CPU during the drain, s", r.Ours.DrainCPU, r.Raw.DrainCPU)
	row("RSS after the drain, MB", r.Ours.RSSDrainMB, r.Raw.RSSDrainMB)
}

func run(ctx context.Context, cfg config) (report, error) {
	rep := report{IDs: cfg.ids, Body: cfg.body, Workers: cfg.workers, Held: cfg.hold}
	tmp, err := os.MkdirTemp("", "fp-scale-")
	if err != nil {
		return rep, err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "bin")
	for _, cmd := range []string{"fencepostd", "fencepost"} {
		b := exec.Command("go", "build", "-o", filepath.Join(bin, cmd), "./cmd/"+cmd)
		b.Stdout, b.Stderr = os.Stderr, os.Stderr
		if err := b.Run(); err != nil {
			return rep, fmt.Errorf("build %s (run from the module's root): %w", cmd, err)
		}
	}
	self, err := os.Executable()
	if err != nil {
		return rep, err
	}
	ours := &proc{name: "fencepostd", dir: filepath.Join(tmp, "ours")}
	if cfg.heapProfile != "" {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return rep, err
		}
		ours.pprof = l.Addr().String()
		l.Close()
		ours.heapPrefix = cfg.heapProfile
	}
	ours.start = func(port int) *exec.Cmd {
		args := []string{"--data-dir", ours.dir, "--port", strconv.Itoa(port), "--http", "off", "--log-level", "warn"}
		if ours.pprof != "" {
			args = append(args, "--pprof", ours.pprof)
		}
		c := exec.Command(filepath.Join(bin, "fencepostd"), append(args, cfg.daemonFlags...)...)
		c.Env = append(os.Environ(), cfg.daemonEnv...)
		return c
	}
	raw := &proc{name: "raw", dir: filepath.Join(tmp, "raw")}
	if cfg.heapProfile != "" {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return rep, err
		}
		raw.pprof = l.Addr().String()
		l.Close()
		raw.heapPrefix = cfg.heapProfile + "-raw"
	}
	raw.start = func(port int) *exec.Cmd {
		c := exec.Command(self, rawServeArg, raw.dir, strconv.Itoa(port))
		c.Env = append(os.Environ(), "FP_SCALE_PPROF="+raw.pprof)
		return c
	}
	if cfg.bare {
		ours.start = func(port int) *exec.Cmd {
			c := exec.Command(self, rawServeArg, ours.dir, strconv.Itoa(port))
			c.Env = append(os.Environ(), "FP_SCALE_PPROF="+ours.pprof)
			return c
		}
		raw.start = func(port int) *exec.Cmd {
			// Only fencepost's side is profiled.
			c := exec.Command(self, rawServeArg, raw.dir, strconv.Itoa(port))
			c.Env = append(os.Environ(), "FP_SCALE_SERVER_PROFILE=", "FP_SCALE_PPROF="+raw.pprof)
			return c
		}
	}
	cli := func(args ...string) *exec.Cmd {
		return exec.Command(filepath.Join(bin, "fencepost"), append([]string{"--server", ours.url(), "--timeout", "5m"}, args...)...)
	}
	if err := measureSide(ctx, cfg, ours, &rep.Ours, &rep.EmptyMB[0], oursSide{cli}); err != nil {
		return rep, fmt.Errorf("fencepostd: %w", err)
	}
	if err := measureSide(ctx, cfg, raw, &rep.Raw, &rep.EmptyMB[1], rawSide{}); err != nil {
		return rep, fmt.Errorf("raw: %w", err)
	}
	return rep, nil
}

// sideOps is what differs between the two sides.
type sideOps interface {
	ready(ctx context.Context, url string) error // the server answers
	post(ctx context.Context, url string, cfg config) error
	// hold holds cfg.hold ids until the returned release is called (raw:
	// nothing to hold).
	hold(ctx context.Context, url string, cfg config) (release func(), err error)
	stat(ctx context.Context) (time.Duration, error) // 0: not measured
	drain(ctx context.Context, url string, cfg config) error
}

// measureSide runs one side: start, post, restart, drain, filling in s
// and the empty server's RSS as it goes.
func measureSide(ctx context.Context, cfg config, p *proc, s *side, empty *float64, ops sideOps) error {
	if _, err := p.run(ctx, ops); err != nil {
		return err
	}
	defer p.stop()
	*empty = p.rssMB()
	t0 := time.Now()
	if err := ops.post(ctx, p.url(), cfg); err != nil {
		return fmt.Errorf("post: %w", err)
	}
	s.PostSeconds = time.Since(t0).Seconds()
	release, err := ops.hold(ctx, p.url(), cfg)
	if err != nil {
		return fmt.Errorf("hold: %w", err)
	}
	defer release()
	if err := sleep(ctx, cfg.settle); err != nil {
		return err
	}
	s.RSSAfterPostMB = p.rssMB()
	s.HeapPostMB = p.heap(ctx, "post")
	p.stop()
	s.DiskMB = diskMB(p.dir)
	took, err := p.run(ctx, ops)
	if err != nil {
		return fmt.Errorf("restart: %w", err)
	}
	s.RestartSeconds = took.Seconds()
	if err := sleep(ctx, cfg.settle); err != nil {
		return err
	}
	s.RSSRestartMB = p.rssMB()
	s.PeakRestartMB = p.statusMB("VmHWM:")
	s.HeapRestartMB = p.heap(ctx, "restart")
	stat, err := ops.stat(ctx)
	if err != nil {
		return fmt.Errorf("stat after restart: %w", err)
	}
	if stat > 0 {
		s.StatSeconds = stat.Seconds()
		s.RSSStatMB = p.rssMB()
	}
	if cfg.late > 0 {
		if err := sleep(ctx, cfg.late); err != nil {
			return err
		}
		s.RSSLateMB = p.rssMB()
	}
	if cfg.noDrain {
		return nil
	}
	release() // the held ids free for the drain's workers
	t0, cpu0 := time.Now(), p.cpuSeconds()
	if err := ops.drain(ctx, p.url(), cfg); err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	s.DrainSeconds = time.Since(t0).Seconds()
	s.DrainCPU = p.cpuSeconds() - cpu0
	s.RSSDrainMB = p.rssMB()
	return nil
}

// proc is a server process of one side.
type proc struct {
	name  string
	dir   string
	port  int
	start func(port int) *exec.Cmd
	cmd   *exec.Cmd

	pprof      string // fencepostd's --pprof address, or ""
	heapPrefix string
}

// heap writes the process's heap profile (binary, and as text with
// runtime.MemStats) to heapPrefix-when.*, when it serves --pprof, and
// returns the heap in use (HeapAlloc) right after the collection, MB.
func (p *proc) heap(ctx context.Context, when string) float64 {
	if p.pprof == "" {
		return 0
	}
	// The binary profile first: gc=1 collects, so the MemStats of the
	// text one right after it show the live heap.
	for _, f := range [][2]string{{".pb.gz", "gc=1"}, {".txt", "debug=1"}} {
		if err := fetchTo(ctx, "http://"+p.pprof+"/debug/pprof/heap?"+f[1], p.heapPrefix+"-"+when+f[0]); err != nil {
			fmt.Fprintf(os.Stderr, "scale: heap profile %s: %v\n", when, err)
		}
	}
	b, err := os.ReadFile(p.heapPrefix + "-" + when + ".txt")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "# HeapAlloc = "); ok {
			n, _ := strconv.ParseFloat(v, 64)
			return n / (1 << 20)
		}
	}
	return 0
}

func fetchTo(ctx context.Context, url, file string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func (p *proc) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", p.port) }

// run starts the server (on the same port as before, if it ran) and
// returns how long it took to answer.
func (p *proc) run(ctx context.Context, ops sideOps) (time.Duration, error) {
	if p.port == 0 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		p.port = l.Addr().(*net.TCPAddr).Port
		l.Close()
	}
	p.cmd = p.start(p.port)
	p.cmd.Stderr = os.Stderr
	t0 := time.Now()
	if err := p.cmd.Start(); err != nil {
		return 0, err
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := ops.ready(rctx, p.url())
		cancel()
		if err == nil {
			return time.Since(t0), nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			p.stop()
			return 0, fmt.Errorf("%s not ready: %w", p.name, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (p *proc) stop() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	_ = p.cmd.Wait()
	p.cmd = nil
}

// rssMB reads the process's resident set from /proc (Linux).
func (p *proc) rssMB() float64 { return p.statusMB("VmRSS:") }

// statusMB reads one figure in kB of /proc/PID/status (Linux), in MB.
func (p *proc) statusMB(field string) float64 {
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == field {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

// cpuSeconds reads the process's user and system CPU time from /proc
// (Linux; clock ticks of 1/100 s).
func (p *proc) cpuSeconds() float64 {
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	// The fields after the command name (which may hold spaces) start
	// after the last ')'; utime and stime are the 12th and 13th of them.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	user, _ := strconv.ParseFloat(f[11], 64)
	sys, _ := strconv.ParseFloat(f[12], 64)
	return (user + sys) / 100
}

func diskMB(dir string) float64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
		if err == nil && !e.IsDir() {
			if fi, err := e.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return float64(n) / (1 << 20)
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// oursSide posts through the client and drains with workers.
type oursSide struct {
	cli func(args ...string) *exec.Cmd
}

func (oursSide) ready(ctx context.Context, url string) error {
	c, err := client.Connect(url, client.WithTimeout(5*time.Second))
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.World(ctx, "default")
	if errors.Is(err, world.ErrUnknownWorld) {
		// A plain server (--bare): the world fencepostd would make.
		_, err = c.CreateWorld(ctx, "default", world.Config{})
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

// rawServe runs the raw side's server until SIGTERM.
func rawServe(dir, port string) error {
	p, err := strconv.Atoi(port)
	if err != nil {
		return err
	}
	if file := os.Getenv("FP_SCALE_SERVER_PROFILE"); file != "" {
		// One profile per start: the last start's (the restart) wins.
		stop, err := profileCPU(file)
		if err != nil {
			return err
		}
		defer stop()
	}
	s, err := server.Start(server.Config{StoreDir: dir, Port: p, SyncInterval: time.Second})
	if err != nil {
		return err
	}
	if addr := os.Getenv("FP_SCALE_PPROF"); addr != "" {
		// --heapprofile: the same profiles as fencepostd's --pprof.
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return err
		}
		m := http.NewServeMux()
		m.HandleFunc("/debug/pprof/", httppprof.Index)
		go http.Serve(l, m)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	<-sig
	s.Stop()
	return nil
}

// profileCPU writes a CPU profile of this process to file until stop.
func profileCPU(file string) (stop func(), err error) {
	f, err := os.Create(file)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
