package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/mailbox"
)

// defaultLsLimit is how many ids one `fencepost ls` prints unless told.
const defaultLsLimit = 1000

// The flags of ls (one command runs per process).
var lsFlags struct {
	HeldBy   nodeValue  `name:"held-by" placeholder:"NODE" help:"only ids whose live record names NODE"`
	WithMail bool       `name:"with-mail" help:"only ids with messages waiting in their mailbox (after the cursor: committed ones not yet removed do not count)"`
	Dead     bool       `name:"dead" help:"only ids with dead letters"`
	Limit    limitValue `name:"limit" placeholder:"N" default:"${ls_limit}" help:"print at most N ids, N >= 1; a cut list ends with more next=ID"`
	After    idValue    `name:"after" placeholder:"ID" help:"resume after this id: the next= of the page before (ids sort by their UTF-8 bytes); with --shards, after this shard"`
	Shards   bool       `name:"shards" help:"list the shards of a sharded world (shard=S state=... node=... epoch=...), not its ids"`
	// Scheduled: the pending timers (cmd_timer.go).
	Scheduled bool `name:"scheduled" help:"list the pending timers (timer id=... key=... at=... due_in=...), sorted by id and key, not ids"`
}

func init() {
	register("ls", &command{
		usage: "ls [--held-by NODE] [--with-mail] [--dead] [--limit N] [--after ID] | ls --shards [--held-by NODE] [--limit N] [--after S] | ls --scheduled [--limit N] [--after ID]",
		short: "list ids in order, one line each (id ...), then listed count=K [more next=ID]",
		examples: []string{
			"fencepost ls --held-by node-a            # id id=order-42 state=held node=node-a epoch=1 ... per id, then listed count=K more=false",
			"fencepost ls --with-mail --limit 100     # a page of ids with mail; the next: --after the listed next=ID",
			"fencepost ls --dead --json",
			"fencepost ls --shards                    # a sharded world's shards: shard shard=S state=held node=... epoch=... per shard, then listed count=K",
			"fencepost ls --scheduled                 # pending timers: timer id=... key=... at=... due_in=... per timer, then listed count=K",
		},
		flags: &lsFlags,
		run:   runLs,
	})
}

// runLs prints one `id` line per id, then the outcome `listed` (exit 0):
//
//	id id=order.42 state=held node=n1 epoch=7 expires=... depth=3 dead=0
//	id id="a b" state=free epoch=2 depth=0 dead=1
//	listed count=2 more next="a b"
//
// state is held (a live lease), free (no live lease; epoch is the last
// one, 0 for an id never owned) or corrupt (its record does not decode;
// error says why). With --json each line is an object with the same names
// ("outcome":"id" or "listed"; "more" always, "next" when more).
func runLs(e *env, args []string) int {
	if len(args) != 0 {
		return e.usageErr("ls", "takes no arguments, got %d (filter with --held-by, --with-mail, --dead)", len(args))
	}
	if lsFlags.Scheduled {
		return runLsScheduled(e)
	}
	if lsFlags.Shards {
		return runLsShards(e)
	}
	return e.worldOp(func(ctx context.Context, w *client.World) int {
		page, err := w.Mailboxes.List(ctx, mailbox.ListOptions{
			HeldBy: string(lsFlags.HeldBy), WithMail: lsFlags.WithMail, Dead: lsFlags.Dead,
			Limit: int(lsFlags.Limit), After: string(lsFlags.After),
		})
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("%w; --timeout bounds the whole listing, and a page reads every record and mailbox of the world (seconds per million ids): raise --timeout", err)
		}
		if err != nil {
			return e.fail(err)
		}
		for _, en := range page.Entries {
			fields := []field{f("id", en.ID)}
			if u, err := w.Unit(en.ID); err == nil && u.Sharded() {
				fields = append(fields, f("shard", u.Shard)) // the shard whose record is the id's
			}
			switch {
			case en.Err != nil:
				fields = append(fields, f("state", "corrupt"), f("error", en.Err.Error()))
			case en.Owner.Held:
				fields = append(fields, f("state", "held"), f("node", en.Owner.Node), f("epoch", en.Owner.Epoch), f("expires", en.Owner.Expires))
			default:
				fields = append(fields, f("state", "free"), f("epoch", en.Owner.Epoch))
			}
			fields = append(fields, f("depth", en.Depth), f("dead", en.DeadLetters))
			if en.CommittedStored > 0 {
				// Committed, not yet purged: stored, not waiting.
				fields = append(fields, f("committed_stored", en.CommittedStored))
			}
			e.emit("id", fields...)
		}
		fields := []field{f("count", len(page.Entries)), f("more", page.More)}
		if page.More {
			fields = append(fields, f("next", page.Next))
		}
		if page.Skipped > 0 {
			fields = append(fields, f("skipped", page.Skipped))
		}
		e.emit("listed", fields...)
		return exitOK
	})
}

// runLsShards prints one `shard` line per shard of a sharded world, in
// order, then `listed` (exit 0), paged as ls pages ids (--limit, and
// --after the next= of the page before):
//
//	shard shard=0 state=held node=n1 epoch=7 expires=...
//	shard shard=1 state=free epoch=2
//	listed count=2 more next=1
//
// state is held, free (epoch is the last one, 0 for a shard never owned)
// or corrupt (error says why), as in ls. --held-by keeps the shards whose
// live record names NODE. A per-id world has no shards: a usage error.
func runLsShards(e *env) int {
	if lsFlags.WithMail || lsFlags.Dead {
		return e.usageErr("ls", "--shards lists shards by their records; --with-mail and --dead filter ids")
	}
	from := 0
	if e.given["after"] {
		q, err := strconv.Atoi(string(lsFlags.After))
		if err != nil || q < 0 {
			return e.usageErr("ls", "--after %q: with --shards, give the shard number the page before ended at (its next=)", string(lsFlags.After))
		}
		from = q + 1
	}
	return e.worldOp(func(ctx context.Context, w *client.World) int {
		if w.Shards() == 0 {
			return e.usageErr("ls", "--shards: world %q is a per-id world (created without shards): list its ids with ls", w.Name)
		}
		if from > w.Shards() {
			return e.usageErr("ls", "--after %d: world %q has shards 0..%d", from-1, w.Name, w.Shards()-1)
		}
		page, err := w.ListShards(ctx, client.ShardListOptions{HeldBy: string(lsFlags.HeldBy), From: from, Limit: int(lsFlags.Limit)})
		if err != nil {
			return e.fail(err)
		}
		for _, en := range page.Entries {
			fields := []field{f("shard", en.Shard)}
			switch {
			case en.Err != nil:
				fields = append(fields, f("state", "corrupt"), f("error", en.Err.Error()))
			case en.Owner.Held:
				fields = append(fields, f("state", "held"), f("node", en.Owner.Node), f("epoch", en.Owner.Epoch), f("expires", en.Owner.Expires))
			default:
				fields = append(fields, f("state", "free"), f("epoch", en.Owner.Epoch))
			}
			e.emit("shard", fields...)
		}
		fields := []field{f("count", len(page.Entries)), f("more", page.More)}
		if page.More {
			fields = append(fields, f("next", page.Entries[len(page.Entries)-1].Shard))
		}
		e.emit("listed", fields...)
		return exitOK
	})
}
