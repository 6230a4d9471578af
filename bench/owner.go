package bench

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/fencing"
	"github.com/fencepost/fencepost/worker"
)

// OwnerEnv is the environment variable that turns a process into a bench
// owner: the takeover and handoff scenarios start Config.OwnerExe with it
// set to a JSON owner spec. A main (or a test's TestMain) that may be
// started that way checks IsOwnerProcess first and exits with OwnerMain.
const OwnerEnv = "FENCEPOST_BENCH_OWNER"

// OwnerProfileEnv, set in the bench's environment to a directory, makes
// each owner process write a CPU profile of its life there, named
// NODE.cpu.pprof (owners that are killed write none: only those that
// stop gracefully, at a stop fault or at the end of the run).
const OwnerProfileEnv = "FENCEPOST_BENCH_OWNER_CPUPROFILE"

// ownerSpec is what an owner process is told.
type ownerSpec struct {
	URL   string `json:"url"`
	World string `json:"world"`
	Node  string `json:"node"`
	TTLms int64  `json:"ttl_ms"`
	Creds string `json:"creds,omitempty"` // the node's credentials file (Config.Auth)
	// State: the counter scenario's state handler (counter.go).
	State bool `json:"state,omitempty"`
	// Pcgroups makes the process a member process of the pcgroups side
	// (pcgroups.go), not a fencepost owner.
	Pcgroups *pcgSpec `json:"pcgroups,omitempty"`
}

// IsOwnerProcess says whether this process was started as a bench owner.
func IsOwnerProcess() bool { return os.Getenv(OwnerEnv) != "" }

// OwnerMain runs a bench owner process and returns its exit code: a
// worker.Worker serving every id of the bench world, whose handler reports
// each delivery on stdout, one line written before the handler returns
// (lineWriter: with the lines of the handlers that report at the same
// time):
//
//	d ID SEQ EPOCH MSG SENT_NS HANDLER_NS
//
// (MSG and SENT_NS from the message body, HANDLER_NS the handler's start).
// It prints "r PROCS" once it holds its node lease (PROCS: the GOMAXPROCS
// it runs with, Config.OwnerGOMAXPROCS), and "f CAUSE" before it exits
// with code 3 on a self-fence. It stops gracefully (releasing every id at
// once) on SIGTERM or SIGINT or when stdin closes, so that owners do not
// outlive their parent.
func OwnerMain() int {
	var spec ownerSpec
	if err := json.Unmarshal([]byte(os.Getenv(OwnerEnv)), &spec); err != nil {
		fmt.Fprintf(os.Stderr, "bench owner: %s: %v\n", OwnerEnv, err)
		return exitOwnerError
	}
	if spec.Pcgroups != nil {
		return pcgMemberMain(spec)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("node", spec.Node)
	if dir := os.Getenv(OwnerProfileEnv); dir != "" {
		f, err := os.Create(filepath.Join(dir, spec.Node+".cpu.pprof"))
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench owner: %s: %v\n", OwnerProfileEnv, err)
			return exitOwnerError
		}
		defer func() { pprof.StopCPUProfile(); _ = f.Close() }()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()
	opts := []client.Option{client.WithTimeout(30 * time.Second), client.WithLogger(log)}
	if spec.Creds != "" {
		opts = append(opts, client.WithCreds(spec.Creds))
	}
	c, err := client.Connect(spec.URL, opts...)
	if err != nil {
		log.Error("connect", "error", err)
		return exitOwnerError
	}
	defer c.Close()
	w, err := c.World(ctx, spec.World)
	if err != nil {
		log.Error("open world", "error", err)
		return exitOwnerError
	}
	out := newLineWriter(os.Stdout)
	handler := func(_ context.Context, m drain.Message) error {
		at := time.Now().UnixNano()
		var n, sent uint64
		if len(m.Body) >= 16 {
			n, sent = binary.BigEndian.Uint64(m.Body[0:8]), binary.BigEndian.Uint64(m.Body[8:16])
		}
		b := make([]byte, 0, 96)
		b = append(b, "d "...)
		b = append(b, m.ID...)
		for _, v := range []uint64{m.Seq, m.Fence.Epoch, n, sent, uint64(at)} {
			b = append(b, ' ')
			b = strconv.AppendUint(b, v, 10)
		}
		b = append(b, '\n')
		// The parent must know of the delivery before it can be committed:
		// if the report cannot be written, the message is not acknowledged.
		return out.write(b)
	}
	wcfg := worker.Config{Node: spec.Node, TTL: time.Duration(spec.TTLms) * time.Millisecond, Idle: time.Hour, Log: log}
	var wk *worker.Worker
	if spec.State {
		wk, err = w.NewStateWorker(wcfg, counting(handler))
	} else {
		wk, err = w.NewWorker(wcfg, handler)
	}
	if err != nil {
		log.Error("worker", "error", err)
		return exitOwnerError
	}
	go func() {
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for wk.Session() == nil {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
		_ = out.write(fmt.Appendf(nil, "r %d\n", runtime.GOMAXPROCS(0)))
	}()
	err = wk.Run(ctx)
	var cause fencing.Cause
	switch {
	case errors.As(err, &cause):
		_ = out.write(fmt.Appendf(nil, "f %s\n", string(cause)))
		return exitOwnerFenced
	case err != nil:
		log.Error("worker", "error", err)
		return exitOwnerError
	}
	return 0
}

// Exit codes of an owner process.
const (
	exitOwnerError  = 1
	exitOwnerFenced = 3
)

// ownerLine is one parsed line of an owner's stdout.
type ownerLine struct {
	kind                    byte // 'd', 'r', 'f'
	id                      string
	seq, epoch, n, sent, at uint64 // n of 'r': the owner's GOMAXPROCS (0: not said)
	text                    string // the cause of 'f'
}

// parseOwnerLine parses one line (without its newline).
func parseOwnerLine(s string) (ownerLine, error) {
	if s == "" {
		return ownerLine{}, errors.New("empty line")
	}
	l := ownerLine{kind: s[0]}
	switch s[0] {
	case 'r':
		if len(s) > 1 {
			procs, ok := strings.CutPrefix(s, "r ")
			v, err := strconv.ParseUint(procs, 10, 64)
			if !ok || err != nil {
				return l, fmt.Errorf("ready line %q: want r and a number", s)
			}
			l.n = v
		}
		return l, nil
	case 'f':
		text, ok := strings.CutPrefix(s, "f ")
		switch {
		case ok:
			l.text = text
		case s != "f": // "f" alone: no cause
			return l, fmt.Errorf("fence line %q: want f and its cause", s)
		}
		return l, nil
	case 'd':
	default:
		return l, fmt.Errorf("unknown line %q", s)
	}
	f := splitFields(s)
	if len(f) != 7 || f[0] != "d" {
		return l, fmt.Errorf("delivery line %q: want d and 6 fields", s)
	}
	l.id = f[1]
	for i, p := range []*uint64{&l.seq, &l.epoch, &l.n, &l.sent, &l.at} {
		v, err := strconv.ParseUint(f[i+2], 10, 64)
		if err != nil {
			return l, fmt.Errorf("delivery line %q: %w", s, err)
		}
		*p = v
	}
	return l, nil
}

func splitFields(s string) []string {
	out := make([]string, 0, 7)
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == ' ' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

// scanLines calls f for each line of r until EOF.
func scanLines(r io.Reader, f func(string)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		f(sc.Text())
	}
	return sc.Err()
}
