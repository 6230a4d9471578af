package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/fencing"
	"github.com/fencepost/fencepost/metrics"
	"github.com/fencepost/fencepost/worker"
)

// The flags of the work command.
var workFlags struct {
	nodeFlag
	ttlFlag
	IDs     string        `name:"ids" placeholder:"A,B" help:"comma-separated ids to serve"`
	All     bool          `name:"all" help:"serve every id of the world"`
	Exec    string        `name:"exec" placeholder:"CMD" help:"shell command run per message (required)"`
	Grace   time.Duration `name:"grace" placeholder:"D" default:"5s" help:"when a holding is lost or the worker stops: SIGTERM to the command's process group, SIGKILL this long after"`
	Metrics string        `name:"metrics" placeholder:"ADDR" help:"serve Prometheus metrics of this worker at http://ADDR/metrics (e.g. 127.0.0.1:9464)"`
	State   bool          `name:"state" help:"per-id state: CMD reads the id's state (JSON) from the file $FENCEPOST_STATE and writes its writes (JSON, null deletes) to $FENCEPOST_STATE_WRITES; they commit with the message, exactly once (work_state.go, examples/state)"`
}

func init() {
	register("work", &command{
		usage: "work --node N (--ids a,b | --all) --exec CMD [--ttl 10s]",
		short: "serve mailboxes: each message to CMD on stdin (env FENCEPOST_ID, _EPOCH, _FROM, _SEQ, _DELIVERY, _REDELIVERED); exit 0 acks; exit 3 on self-fence; logs at info (--json: one event per line)",
		long: `CMD runs as sh -c CMD, one message at a time per id, in a process group of its
own, with the body on stdin and in its environment:
  FENCEPOST_ID, FENCEPOST_SEQ      the id and the message's sequence number
  FENCEPOST_FROM                   the sender ("" if none)
  FENCEPOST_NODE, FENCEPOST_EPOCH  this worker's node and its epoch of the id
  FENCEPOST_DELIVERY               1, then 2, 3... after failed deliveries (exit
                                   status not 0); dead-lettered after the world's
                                   max_deliveries
  FENCEPOST_REDELIVERED            1 if the message may have been handed to a
                                   handler before (a worker that held the id was
                                   killed, lapsed, was seized, or stopped while
                                   its handler ran; a commit of unknown outcome;
                                   a failed delivery); 0 only if it never was.
                                   It may say 1 for a first delivery, and says 0
                                   for a second only after a seize --force of a
                                   live worker that had not yet seen it (docs/
                                   design.md 3.6): handlers are to be idempotent;
                                   1 says when to check for a repeat
  FENCEPOST_STATE, _STATE_WRITES   with --state: see --state below
  FENCEPOST_CALL                   1 if the message is a call (fencepost call):
                                   then CMD's stdout is the answer, sent to the
                                   caller once the message is committed (not
                                   copied to the worker's stdout); 0 otherwise
Exit status 0 acknowledges the message. Acknowledged messages are committed
every 100 messages or 1 s per id, and 20 ms after an id goes quiet: a crash
hands the next holder again at most what was handled since the last commit
(and the message in flight), labelled FENCEPOST_REDELIVERED=1. When the id is
taken over, on a self-fence or when the worker stops (SIGINT, SIGTERM), the
command's process group gets SIGTERM, and SIGKILL --grace later. A worker that
stops releases each id whose handled messages are all committed: the next
worker's deliveries say FENCEPOST_REDELIVERED=0.
`,
		examples: []string{
			"fencepost work --node w1 --all --exec 'cat; echo'                # runs until Ctrl-C: every id with mail, each message to the command",
			"fencepost work --node w1 --ids order-42,order-43 --exec ./handle --json   # one event per line on stdout",
		},
		flags: &workFlags,
		run:   runWork,
	})
}

func runWork(e *env, args []string) int {
	switch {
	case len(args) != 0:
		return e.usageErr("work", "takes no arguments, got %d", len(args))
	case workFlags.Node == "":
		return e.usageErr("work", "--node is required")
	case workFlags.Exec == "":
		return e.usageErr("work", "--exec is required")
	case workFlags.All == (workFlags.IDs != ""):
		return e.usageErr("work", "give exactly one of --ids and --all")
	}
	var ids []string
	if workFlags.IDs != "" {
		ids = strings.Split(workFlags.IDs, ",")
	}
	ev, log := workLog(e)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var set *metrics.Set
	if workFlags.Metrics != "" {
		srv, err := serveMetrics(workFlags.Metrics)
		if err != nil {
			return e.fail(err)
		}
		defer srv.Close()
		set = metrics.Default
		e.clientOpts = append(e.clientOpts, client.WithMetrics(set))
	}
	octx, cancel := e.ctx()
	w, err := e.openWorld(octx)
	cancel()
	if err != nil {
		return e.fail(err)
	}
	// With --json stdout carries the events: the commands write theirs
	// to stderr.
	var handlerOut io.Writer = os.Stdout
	if e.json {
		handlerOut = os.Stderr
	}
	run := execHandler
	if workFlags.State {
		run = execStateHandler
	}
	h := ev.observe(log, w.Config.MaxDeliveries, run(workFlags.Exec, workFlags.Node, workFlags.Grace, handlerOut))
	wk, err := w.NewWorker(worker.Config{Node: workFlags.Node, TTL: time.Duration(workFlags.TTL), IDs: ids, Log: e.log, Metrics: set, State: workFlags.State}, h)
	if err != nil {
		return e.fail(err)
	}
	ttl, _ := w.Config.TTL(time.Duration(workFlags.TTL)) // NewWorker checked it
	serving := []any{"all", true}
	if ids != nil {
		serving = []any{"ids", ids}
	}
	log.Info("worker starting", append([]any{eventKey, "started", "world", e.world}, append(serving, "ttl", ttl, "exec", workFlags.Exec, "max_deliveries", w.Config.MaxDeliveries)...)...)
	err = wk.Run(ctx)
	var cause fencing.Cause
	switch {
	case errors.As(err, &cause):
		log.Error("stopped: self-fence", eventKey, "stopped", "reason", "self-fence", "cause", string(cause), "exit", exitSelfFence)
		fmt.Fprintf(e.err, "SELF-FENCE: %s node=%s world=%s\n", string(cause), workFlags.Node, e.world)
		return exitSelfFence
	case err != nil:
		log.Error("stopped: error", eventKey, "stopped", "reason", "error", "cause", err, "exit", exitError)
		return e.fail(err)
	}
	log.Info("stopped", eventKey, "stopped", "reason", "signal", "cause", context.Cause(ctx), "exit", exitOK)
	return exitOK
}

// workLog makes the work command's logger: events (work_events.go) and
// the other log lines, on stderr at --log-level, info unless --log-level
// or FENCEPOST_LOG says otherwise. It replaces e.log, so the client, the
// worker and its drains log through it; log is the command's own, with
// the node.
func workLog(e *env) (*workEvents, *slog.Logger) {
	var level slog.Level
	_ = level.UnmarshalText([]byte(e.logLevel)) // parse checked it
	given := os.Getenv("FENCEPOST_LOG") != "" || e.given["log-level"]
	if !given {
		level = slog.LevelInfo
	}
	ev := newWorkEvents(slog.NewTextHandler(e.err, &slog.HandlerOptions{Level: level}), e.json, level <= slog.LevelDebug, e.out)
	e.log = slog.New(ev)
	return ev, e.log.With("node", workFlags.Node)
}

// execHandler runs cmd with sh -c per message: the body on stdin, the
// message in the environment; exit status 0 acknowledges. Each command
// runs in a process group of its own. When the drain must stop (the id was
// taken over, a self-fence, the worker stops), the whole group gets
// SIGTERM, and SIGKILL grace later if anything of it is left: no child of
// a handler goes on writing under an epoch that is no longer the holder's.
func execHandler(cmd, node string, grace time.Duration, stdout io.Writer) drain.Handler {
	return func(ctx context.Context, m drain.Message) error {
		return runHandler(ctx, cmd, node, grace, stdout, m)
	}
}

// runHandler runs cmd for m as execHandler says, with env added to the
// handler's environment, and returns an *execError if it failed.
func runHandler(ctx context.Context, cmd, node string, grace time.Duration, stdout io.Writer, m drain.Message, env ...string) error {
	c := exec.CommandContext(ctx, "sh", "-c", cmd)
	c.SysProcAttr = handlerProcAttr()
	c.Cancel = func() error { return stopGroup(c.Process.Pid, grace) }
	c.WaitDelay = grace + time.Second // then Wait stops waiting for the command's pipes
	c.Stdin = bytes.NewReader(m.Body)
	c.Stdout, c.Stderr = stdout, os.Stderr
	var answer *capped
	isCall := "0"
	if m.IsCall() {
		// A call: the command's stdout is the answer.
		answer, isCall = &capped{max: maxExecAnswer}, "1"
		c.Stdout = answer
	}
	c.Env = append(os.Environ(),
		"FENCEPOST_ID="+m.ID,
		"FENCEPOST_EPOCH="+strconv.FormatUint(m.Fence.Epoch, 10),
		"FENCEPOST_FROM="+m.From,
		"FENCEPOST_SEQ="+strconv.FormatUint(m.Seq, 10),
		"FENCEPOST_NODE="+node,
		"FENCEPOST_DELIVERY="+strconv.Itoa(m.Delivery),
		"FENCEPOST_REDELIVERED="+redelivered(m),
		"FENCEPOST_CALL="+isCall,
	)
	c.Env = append(c.Env, env...)
	if err := c.Run(); err != nil {
		return &execError{cmd: cmd, id: m.ID, seq: m.Seq, err: err}
	}
	if answer != nil {
		if answer.over {
			return &execError{cmd: cmd, id: m.ID, seq: m.Seq, err: fmt.Errorf("its answer (stdout) is over %d bytes", answer.max)}
		}
		if err := m.Reply(answer.buf.Bytes()); err != nil {
			return &execError{cmd: cmd, id: m.ID, seq: m.Seq, err: err}
		}
	}
	return nil
}

// maxExecAnswer bounds what a call's command may write to stdout; the
// answer must also fit the connection's max payload (drain.Message.Reply).
const maxExecAnswer = 64 << 20

// capped keeps what is written to it, up to max bytes, and notes more.
type capped struct {
	buf  bytes.Buffer
	max  int
	over bool
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - c.buf.Len(); len(p) > room {
		c.over = true
		c.buf.Write(p[:max(room, 0)])
		return len(p), nil
	}
	return c.buf.Write(p)
}

// execError is a failed --exec command: its exit status, or why it did
// not run. Its message is the dead letter's error.
type execError struct {
	cmd, id string
	seq     uint64
	err     error
}

func (x *execError) Error() string {
	return fmt.Sprintf("work: %q for %q seq %d: %v", x.cmd, x.id, x.seq, x.err)
}

func (x *execError) Unwrap() error { return x.err }

// stopGroup sends SIGTERM to process group pgid and, if any process of it
// is left after grace, SIGKILL.
func stopGroup(pgid int, grace time.Duration) error {
	err := syscall.Kill(-pgid, syscall.SIGTERM)
	if errors.Is(err, syscall.ESRCH) {
		return os.ErrProcessDone // it ended on its own: its exit status stands
	}
	go func() {
		deadline := time.Now().Add(grace)
		for time.Now().Before(deadline) {
			if syscall.Kill(-pgid, 0) != nil { // ESRCH: the group is gone
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}()
	return err
}

// serveMetrics serves the process's metrics registry at http://addr/metrics
// until the returned server is closed.
func serveMetrics(addr string) (*http.Server, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("work: --metrics %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(metrics.Registry, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	return srv, nil
}

// redelivered is FENCEPOST_REDELIVERED: 1 when the message may have been
// handed to a handler before (drain.Message.Redelivered: a worker that
// held the id died, paused or was stopped with it, a commit of unknown
// outcome, a failed delivery), 0 only when it never was. FENCEPOST_DELIVERY
// counts failed deliveries only.
func redelivered(m drain.Message) string {
	if m.Redelivered {
		return "1"
	}
	return "0"
}
