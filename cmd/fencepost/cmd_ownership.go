package main

import (
	"fmt"
	"strconv"
	"time"
)

func init() {
	register("claim", &command{
		usage: "claim ID --node N [--ttl 10s]",
		short: "take a free id: claimed epoch=E expires=T | held-by",
		flags: ownerFlags(true),
		run: withID("claim", func(e *env, id string) int {
			return e.ownershipOp(func(o ownOps) int {
				l, err := o.s.Claim(o.ctx, id, flagNode, flagTTL)
				if err != nil {
					return e.fail(err)
				}
				e.emit("claimed", f("epoch", l.Epoch), f("expires", l.Expires), f("node", l.Node))
				return exitOK
			})
		}),
	})
	register("owner", &command{
		usage: "owner ID",
		short: "who holds an id: owned-by node=N epoch=E expires=T | free epoch=E",
		run: withID("owner", func(e *env, id string) int {
			return e.ownershipOp(func(o ownOps) int {
				st, err := o.s.Owner(o.ctx, id)
				if err != nil {
					return e.fail(err)
				}
				if !st.Held {
					e.emit("free", f("epoch", st.Epoch))
					return exitFree
				}
				e.emit("owned-by", f("node", st.Node), f("epoch", st.Epoch), f("expires", st.Expires))
				return exitOK
			})
		}),
	})
	register("release", &command{
		usage: "release ID --node N",
		short: "give up a held id: released | not-owner | free",
		flags: ownerFlags(false),
		run: withID("release", func(e *env, id string) int {
			return e.ownershipOp(func(o ownOps) int {
				if err := o.s.Release(o.ctx, id, flagNode); err != nil {
					return e.fail(err)
				}
				e.emit("released")
				return exitOK
			})
		}),
	})
	register("guard", &command{
		usage: "guard ID --node N --epoch E",
		short: "check a holding: owner | fenced current=E | free",
		flags: func(fs *flagSet) {
			ownerFlags(false)(fs)
			fs.Func("epoch", "the epoch to check (required)", epochFlag(&flagEpoch))
		},
		run: withID("guard", func(e *env, id string) int {
			if flagEpoch == 0 {
				return e.usageErr("guard", "--epoch is required")
			}
			return e.ownershipOp(func(o ownOps) int {
				st, err := o.s.Guard(o.ctx, id, flagNode, flagEpoch)
				if err != nil {
					return e.fail(err)
				}
				e.emit("owner", f("epoch", st.Epoch), f("expires", st.Expires))
				return exitOK
			})
		}),
	})
	register("renew", &command{
		usage: "renew ID --node N [--ttl 10s]",
		short: "extend a live lease: renewed expires=T | held-by | free",
		flags: ownerFlags(true),
		run: withID("renew", func(e *env, id string) int {
			return e.ownershipOp(func(o ownOps) int {
				l, err := o.s.Renew(o.ctx, id, flagNode, flagTTL)
				if err != nil {
					return e.fail(err)
				}
				e.emit("renewed", f("expires", l.Expires), f("epoch", l.Epoch))
				return exitOK
			})
		}),
	})
	register("seize", &command{
		usage: "seize ID --node N [--ttl 10s] [--force]",
		short: "take over an owned id: seized epoch=E | free | live | contended",
		flags: func(fs *flagSet) {
			ownerFlags(true)(fs)
			fs.BoolVar(&flagForce, "force", false, "take a live id (operator)")
		},
		run: withID("seize", func(e *env, id string) int {
			return e.ownershipOp(func(o ownOps) int {
				l, err := o.s.Seize(o.ctx, id, flagNode, flagTTL, flagForce)
				if err != nil {
					return e.fail(err)
				}
				e.emit("seized", f("epoch", l.Epoch), f("expires", l.Expires), f("node", l.Node))
				return exitOK
			})
		}),
	})
	register("reset", &command{
		usage: "reset --yes",
		short: "drop every record, epoch and mailbox of the world: cleared",
		flags: func(fs *flagSet) { fs.BoolVar(&flagYes, "yes", false, "confirm") },
		run: func(e *env, args []string) int {
			if len(args) != 0 {
				return e.usageErr("reset", "takes no arguments")
			}
			if !flagYes {
				return e.usageErr("reset", "this drops the whole world %q; add --yes", e.world)
			}
			ctx, cancel := e.ctx()
			defer cancel()
			c, err := e.client()
			if err != nil {
				return e.fail(err)
			}
			if err := c.ResetWorld(ctx, e.world); err != nil {
				return e.fail(err)
			}
			e.emit("cleared", f("world", e.world))
			return exitOK
		},
	})
}

// Flag values of the ownership commands (one command runs per process).
var (
	flagNode  string
	flagTTL   time.Duration
	flagEpoch uint64
	flagForce bool
	flagYes   bool
)

func ownerFlags(ttl bool) func(fs *flagSet) {
	return func(fs *flagSet) {
		fs.StringVar(&flagNode, "node", "", "the node acting (required)")
		if ttl {
			fs.Func("ttl", "lease term, e.g. 10s (default: the world's, 10s unless set)", func(s string) error {
				d, err := time.ParseDuration(s)
				if err != nil || d <= 0 {
					return fmt.Errorf("want a positive duration such as 10s (leave --ttl out for the world's default)")
				}
				flagTTL = d
				return nil
			})
		}
	}
}

// withID checks the single positional ID (and --node where the command has
// one) and runs fn.
func withID(name string, fn func(e *env, id string) int) func(e *env, args []string) int {
	return func(e *env, args []string) int {
		if len(args) != 1 {
			return e.usageErr(name, "want exactly one ID, got %d arguments", len(args))
		}
		if commands[name].flags != nil && flagNode == "" && name != "owner" {
			return e.usageErr(name, "--node is required")
		}
		return fn(e, args[0])
	}
}

// epochFlag parses an epoch: a number of 1 or more (epochs start at 1).
func epochFlag(into *uint64) func(string) error {
	return func(s string) error {
		n, err := strconv.ParseUint(s, 10, 64)
		switch {
		case err != nil:
			return fmt.Errorf("want a number: %v", err)
		case n == 0:
			return fmt.Errorf("epochs start at 1")
		}
		*into = n
		return nil
	}
}
