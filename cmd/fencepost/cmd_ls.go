package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/internal/wire"
)

// defaultLsLimit is how many ids one `fencepost ls` prints unless told.
const defaultLsLimit = 1000

// Flag values of ls (one command runs per process).
var lsOpts = drain.ListOptions{Limit: defaultLsLimit}

func init() {
	register("ls", &command{
		usage: "ls [--held-by NODE] [--with-mail] [--dead] [--limit N] [--after ID]",
		short: "list ids in order, one line each (id ...), then listed count=K [more next=ID]",
		flags: func(fs *flagSet) {
			fs.Func("held-by", "only ids whose live record names NODE", func(s string) error {
				if err := wire.ValidateNode(s); err != nil {
					return err
				}
				lsOpts.HeldBy = s
				return nil
			})
			fs.BoolVar(&lsOpts.WithMail, "with-mail", false, "only ids with messages in their mailbox")
			fs.BoolVar(&lsOpts.Dead, "dead", false, "only ids with dead letters")
			fs.Func("limit", "print at most N ids, N >= 1 (default 1000); a cut list ends with more next=ID", func(s string) error {
				n, err := strconv.Atoi(s)
				if err != nil || n < 1 {
					return fmt.Errorf("want a count of 1 or more")
				}
				lsOpts.Limit = n
				return nil
			})
			fs.Func("after", "resume after this id: the next= of the page before (ids sort by their UTF-8 bytes)", func(s string) error {
				if err := wire.ValidateID(s); err != nil {
					return err
				}
				lsOpts.After = s
				return nil
			})
		},
		run: runLs,
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
	return e.worldOp(func(ctx context.Context, w *client.World) int {
		page, err := w.Drainer.List(ctx, lsOpts)
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("%w; --timeout bounds the whole listing, and a page reads every record and mailbox of the world (seconds per million ids): raise --timeout", err)
		}
		if err != nil {
			return e.fail(err)
		}
		for _, en := range page.Entries {
			fields := []field{f("id", en.ID)}
			switch {
			case en.Err != nil:
				fields = append(fields, f("state", "corrupt"), f("error", en.Err.Error()))
			case en.Owner.Held:
				fields = append(fields, f("state", "held"), f("node", en.Owner.Node), f("epoch", en.Owner.Epoch), f("expires", en.Owner.Expires))
			default:
				fields = append(fields, f("state", "free"), f("epoch", en.Owner.Epoch))
			}
			e.emit("id", append(fields, f("depth", en.Depth), f("dead", en.DeadLetters))...)
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
