package verify

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/fencing"
	"github.com/fencepost/fencepost/testkit/history"
	"github.com/fencepost/fencepost/worker"
)

// ownerSpec is what an owner process is told, as the first line of its
// stdin (JSON).
type ownerSpec struct {
	Conn  Conn     `json:"conn"`
	World string   `json:"world"`
	Node  string   `json:"node"`
	TTLms int64    `json:"ttl_ms"`
	IDs   []string `json:"ids"`
}

// Exit codes of an owner process.
const (
	ownerExitError = 1
	ownerExitFence = 3 // a self-fence, as `fencepost work` exits
)

// OwnerMain runs an owner process of a verify run and returns its exit
// code. It reads its spec from the first line of in, serves the run's
// ids with a worker.Worker, and reports on out, one line per event, each
// written with one write before the handler returns (a delivery) or
// before the drain goes on (a commit):
//
//	D <id> <seq> <node> <epoch> <revision> <unix ns> <quoted body> <stored unix ns>
//	C <id> <node> <epoch> <revision> <cursor> <bucket seq> <unix ns>
//	F <cause>
//
// (tab-separated; F when the worker stops; a delivery's stored time is
// the mailbox stream's timestamp, 0 when unknown). Its handler answers a
// call with answerFor (calls.go). It stops when in closes (the parent is
// gone or done), and exits 3 after a self-fence.
func OwnerMain(in io.Reader, out io.Writer) int {
	rd := bufio.NewReader(in)
	line, err := rd.ReadString('\n')
	var spec ownerSpec
	if err == nil {
		err = json.Unmarshal([]byte(line), &spec)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "verify owner: read the spec on stdin: %v\n", err)
		return ownerExitError
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go func() {
		_, _ = io.Copy(io.Discard, rd)
		stop()
	}()
	rep := &reporter{out: out}
	err = serveOwner(ctx, spec, rep)
	rep.line("F\t%s\n", oneLine(fmt.Sprint(err)))
	var cause fencing.Cause
	switch {
	case errors.As(err, &cause):
		return ownerExitFence
	case err != nil && ctx.Err() == nil:
		return ownerExitError
	}
	return 0
}

func serveOwner(ctx context.Context, spec ownerSpec, rep *reporter) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})).With("node", spec.Node)
	c, err := spec.Conn.connect(log)
	if err != nil {
		return err
	}
	defer c.Close()
	w, err := openWorld(ctx, c, spec.World)
	if err != nil {
		return err
	}
	h := func(_ context.Context, m drain.Message) error {
		at := time.Now().UnixNano()
		if err := rep.line("D\t%s\t%d\t%s\t%d\t%d\t%d\t%s\t%d\n", m.ID, m.Seq, m.Fence.Node, m.Fence.Epoch, m.Fence.Revision, at, strconv.Quote(string(m.Body)), unixNano(m.Posted)); err != nil {
			return err
		}
		return m.Reply(answerFor(m, at))
	}
	obs := drain.WithCommitObserver(func(cm drain.Commit) {
		_ = rep.line("C\t%s\t%s\t%d\t%d\t%d\t%d\t%d\n", cm.ID, cm.Node, cm.Epoch, cm.Revision, cm.Cursor, cm.StreamSeq, time.Now().UnixNano())
	})
	wcfg := worker.Config{Node: spec.Node, TTL: time.Duration(spec.TTLms) * time.Millisecond, IDs: spec.IDs, Log: log, DrainOptions: []drain.Option{obs}}
	if w.Shards() > 0 {
		// A sharded world's worker serves the shards the assignment gives
		// this node, not a list of ids; its commits are read from the
		// bucket stream (the parent's follower), not reported.
		wcfg.IDs, wcfg.DrainOptions = nil, nil
	}
	wk, err := w.NewWorker(wcfg, h)
	if err != nil {
		return err
	}
	return wk.Run(ctx)
}

// openWorld opens the world, retrying for 30 s through cuts.
func openWorld(ctx context.Context, c *client.Client, name string) (*client.World, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		octx, cancel := context.WithTimeout(ctx, 5*time.Second)
		w, err := c.World(octx, name)
		cancel()
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return w, err
		}
		if !sleepCtx(ctx, 100*time.Millisecond) {
			return nil, ctx.Err()
		}
	}
}

// reporter writes the report lines of an owner, one write each.
type reporter struct {
	mu  sync.Mutex
	out io.Writer
}

// line writes one line; an error means the parent no longer hears this
// owner: the handler fails, so the message is not acknowledged unseen.
func (r *reporter) line(format string, args ...any) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, err := io.WriteString(r.out, fmt.Sprintf(format, args...))
	return err
}

func oneLine(s string) string { return strings.NewReplacer("\n", " ", "\t", " ").Replace(s) }

// unixNano is t in unix ns, 0 for the zero time.
func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// report is one parsed line of an owner's report.
type report struct {
	kind     byte // 'D', 'C' or 'F'
	delivery history.Delivery
	posted   time.Time // the delivered message's mailbox timestamp; zero: unknown
	commit   history.Commit
	cause    string
}

// parseReport parses one line of an owner's report.
func parseReport(line string) (r report, err error) {
	f := strings.Split(line, "\t")
	u := func(i int) uint64 {
		if err != nil {
			return 0
		}
		var v uint64
		v, err = strconv.ParseUint(f[i], 10, 64)
		return v
	}
	switch {
	case f[0] == "D" && len(f) == 9:
		r.kind = 'D'
		r.delivery = history.Delivery{ID: f[1], Seq: u(2), Node: f[3], Epoch: u(4), Revision: u(5), At: time.Unix(0, int64(u(6)))}
		if err == nil {
			r.delivery.Key, err = strconv.Unquote(f[7])
		}
		if p := u(8); p != 0 {
			r.posted = time.Unix(0, int64(p))
		}
	case f[0] == "C" && len(f) == 8:
		r.kind = 'C'
		r.commit = history.Commit{ID: f[1], Node: f[2], Epoch: u(3), Revision: u(4), Cursor: u(5), StreamSeq: u(6), At: time.Unix(0, int64(u(7)))}
	case f[0] == "F" && len(f) == 2:
		r.kind, r.cause = 'F', f[1]
	default:
		return r, fmt.Errorf("bad report line %q", line)
	}
	return r, err
}

// sleepCtx waits d or until ctx ends; false if ctx ended.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
