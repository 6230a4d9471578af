package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/ownership"
)

// The flags of the watch command.
var watchFlags struct {
	Count int `name:"count" placeholder:"N" help:"exit after N changes (0: until interrupted)"`
}

func init() {
	register("watch", &command{
		usage: "watch [ID] [--count N]",
		short: "print ownership changes as they happen: claimed|renewed|released|seized|lapsed|deleted id=I node=N epoch=E ... (a reset: deleted, per id the watch knew)",
		examples: []string{
			"fencepost watch              # runs until Ctrl-C: claimed id=... node=... epoch=... per change",
			"fencepost watch order-42 --count 1 --json",
		},
		flags: &watchFlags,
		run:   runWatch,
	})
}

// runWatch prints one line (or one JSON object) per change of ID, or of
// every id of the world, until interrupted (exit 0) or --count changes.
func runWatch(e *env, args []string) int {
	if len(args) > 1 {
		return e.usageErr("watch", "want at most one ID, got %d arguments", len(args))
	}
	if watchFlags.Count < 0 {
		return e.usageErr("watch", "--count must not be negative")
	}
	id := ""
	if len(args) == 1 {
		id = args[0]
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	octx, cancel := e.ctx()
	w, err := e.openWorld(octx)
	cancel()
	if err != nil {
		return e.fail(err)
	}
	ctx, cancelWatch := context.WithCancel(ctx)
	defer cancelWatch()
	unit := id
	if id != "" {
		// In a sharded world an id's record is its shard's: watch that.
		if u, err := w.Unit(id); err == nil {
			unit = u.Name
		}
	}
	ch, err := w.Ownership.Watch(ctx, unit)
	if err != nil {
		if ctx.Err() != nil {
			return exitOK
		}
		return e.fail(err)
	}
	// On stderr, so that scripts know every later change will be shown.
	fmt.Fprintf(e.err, "watching world %s%s\n", e.world, map[bool]string{true: " id " + quoteIfNeeded(id)}[id != ""])
	n := 0
	for ev := range ch {
		fields := watchFields(ev)
		if q, ok := wire.UnitShard(ev.ID, w.Config.Shards); ok {
			fields = append(fields, f("shard", q)) // a sharded world's change: id is the shard's unit
		}
		e.emit(string(ev.Kind), fields...)
		if n++; watchFlags.Count > 0 && n >= watchFlags.Count {
			return exitOK
		}
	}
	return exitOK
}

func watchFields(ev ownership.Event) []field {
	fs := []field{f("id", ev.ID), f("node", ev.Node), f("epoch", ev.Epoch)}
	if !ev.Expires.IsZero() {
		fs = append(fs, f("expires", ev.Expires))
	}
	fs = append(fs, f("revision", ev.Revision), f("at", ev.At.UTC().Truncate(time.Microsecond)))
	if ev.NodeLease != 0 {
		fs = append(fs, f("node_lease", ev.NodeLease))
	}
	return fs
}
