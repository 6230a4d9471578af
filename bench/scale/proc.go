package main

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

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
