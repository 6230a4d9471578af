package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/fencing"
	"github.com/fencepost/fencepost/worker"
)

// Flags of the work command.
var (
	flagWorkIDs  string
	flagWorkAll  bool
	flagWorkExec string
)

func init() {
	register("work", &command{
		usage: "work --node N (--ids a,b | --all) --exec CMD [--ttl 10s]",
		short: "serve mailboxes: each message to CMD on stdin (env FENCEPOST_ID, _EPOCH, _FROM, _SEQ); exit 0 acks; exit 3 on self-fence",
		flags: func(fs *flagSet) {
			ownerFlags(true)(fs)
			fs.StringVar(&flagWorkIDs, "ids", "", "comma-separated ids to serve")
			fs.BoolVar(&flagWorkAll, "all", false, "serve every id of the world")
			fs.StringVar(&flagWorkExec, "exec", "", "shell command run per message (required)")
		},
		run: runWork,
	})
}

func runWork(e *env, args []string) int {
	switch {
	case len(args) != 0:
		return e.usageErr("work", "takes no arguments, got %d", len(args))
	case flagNode == "":
		return e.usageErr("work", "--node is required")
	case flagWorkExec == "":
		return e.usageErr("work", "--exec is required")
	case flagWorkAll == (flagWorkIDs != ""):
		return e.usageErr("work", "give exactly one of --ids and --all")
	}
	var ids []string
	if flagWorkIDs != "" {
		ids = strings.Split(flagWorkIDs, ",")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	octx, cancel := e.ctx()
	w, err := e.openWorld(octx)
	cancel()
	if err != nil {
		return e.fail(err)
	}
	wk, err := worker.New(w, worker.Config{Node: flagNode, TTL: flagTTL, IDs: ids, Log: e.log}, execHandler(flagWorkExec, flagNode))
	if err != nil {
		return e.fail(err)
	}
	err = wk.Run(ctx)
	var cause fencing.Cause
	switch {
	case errors.As(err, &cause):
		fmt.Fprintf(e.err, "SELF-FENCE: %s node=%s world=%s\n", string(cause), flagNode, e.world)
		return exitSelfFence
	case err != nil:
		return e.fail(err)
	}
	return exitOK
}

// execHandler runs cmd with sh -c per message: the body on stdin, the
// message in the environment; exit status 0 acknowledges. The command is
// killed when the drain must stop (self-fence, lost id, shutdown).
func execHandler(cmd, node string) drain.Handler {
	return func(ctx context.Context, m drain.Message) error {
		c := exec.CommandContext(ctx, "sh", "-c", cmd)
		c.Stdin = bytes.NewReader(m.Body)
		c.Stdout, c.Stderr = os.Stdout, os.Stderr
		c.Env = append(os.Environ(),
			"FENCEPOST_ID="+m.ID,
			"FENCEPOST_EPOCH="+strconv.FormatUint(m.Fence.Epoch, 10),
			"FENCEPOST_FROM="+m.From,
			"FENCEPOST_SEQ="+strconv.FormatUint(m.Seq, 10),
			"FENCEPOST_NODE="+node,
			"FENCEPOST_DELIVERY="+strconv.Itoa(m.Delivery),
		)
		if err := c.Run(); err != nil {
			return fmt.Errorf("work: %q for %q seq %d: %w", cmd, m.ID, m.Seq, err)
		}
		return nil
	}
}
