// Command scale measures what idle mailboxes cost (docs/design.md 3.11):
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
	"flag"
	"fmt"
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
	"syscall"
	"time"

	"github.com/fencepost/fencepost/server"
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
	shards := flag.Int("shards", 0, "fencepost's world sharded, with N shards (fencepostd --shards; 0: a per-id world)")
	hold := flag.Int("hold", 0, "after posting, hold this many of the ids (the first ones) through the node leases of --workers sessions, until the drain (the variant of docs/experiments/scale.md: 100,000 ids held by 4 workers); RSS, disk and restart are then measured with them held")
	bare := flag.Bool("bare", false, "run fencepost's side on a plain server too (no fencepostd: the world made by the client), to profile the server (FP_SCALE_SERVER_PROFILE=FILE)")
	daemonEnv := flag.String("fencepostd-env", "", "more environment for fencepostd, space-separated (e.g. GOMEMLIMIT=100MiB)")
	late := flag.Duration("late", 0, "also read RSS this long after the restart's reading (after the stat), to see what stays")
	heapProfile := flag.String("heapprofile", "", "write each server's heap profile after posting and after the restart (after the settle) to PREFIX-{post,restart}.pb.gz (fencepostd, through its --pprof) and PREFIX-raw-*.pb.gz, with runtime.MemStats in PREFIX-*.txt")
	flag.Parse()
	cfg := config{ids: *ids, body: *body, workers: *workers, settle: *settle, cpuProfile: *cpuProfile, late: *late, heapProfile: *heapProfile, daemonFlags: strings.Fields(*daemonFlags), daemonEnv: strings.Fields(*daemonEnv), bare: *bare, noDrain: *noDrain, hold: *hold, shards: *shards}
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
	shards             int
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
		if cfg.shards > 0 {
			args = append(args, "--shards", strconv.Itoa(cfg.shards))
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
	if err := measureSide(ctx, cfg, ours, &rep.Ours, &rep.EmptyMB[0], oursSide{cli: cli, bare: cfg.bare, shards: cfg.shards}); err != nil {
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
