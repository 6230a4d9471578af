package main

import "time"

// The flags of the ownership commands (one command runs per process).
type (
	nodeFlag struct {
		Node string `name:"node" placeholder:"N" help:"the node acting (required)"`
	}
	ttlFlag struct {
		TTL ttlValue `name:"ttl" placeholder:"D" help:"lease term, e.g. 10s (default: the world's, 10s unless set)"`
	}
)

var (
	claimFlags struct {
		nodeFlag
		ttlFlag
	}
	releaseFlags struct{ nodeFlag }
	guardFlags   struct {
		nodeFlag
		Epoch epochValue `name:"epoch" placeholder:"E" help:"the epoch to check (required)"`
	}
	renewFlags struct {
		nodeFlag
		ttlFlag
	}
	seizeFlags struct {
		nodeFlag
		ttlFlag
		Force bool `name:"force" help:"take a live id (operator)"`
	}
	resetFlags struct {
		Yes bool `name:"yes" help:"confirm"`
	}
)

func init() {
	register("claim", &command{
		usage: "claim ID --node N [--ttl 10s]",
		short: "take a free id: claimed epoch=E expires=T | held-by",
		examples: []string{
			"fencepost claim order-42 --node node-a --ttl 30s   # claimed epoch=1 expires=... (exit 0), or held-by node=... (exit 10)",
			"fencepost --world orders claim order-42 --node node-a --json",
		},
		flags: &claimFlags,
		run: withID("claim", &claimFlags.Node, func(e *env, id string) int {
			return e.ownershipOp(func(o ownOps) int {
				l, err := o.s.Claim(o.ctx, id, claimFlags.Node, time.Duration(claimFlags.TTL))
				if err != nil {
					return e.fail(err)
				}
				e.emit("claimed", f("epoch", l.Epoch), f("expires", l.Expires), f("node", l.Node))
				return exitOK
			})
		}),
	})
	register("owner", &command{
		usage:    "owner ID",
		short:    "who holds an id: owned-by node=N epoch=E expires=T | free epoch=E",
		examples: []string{"fencepost owner order-42   # owned-by node=node-a epoch=1 expires=... (exit 0), or free epoch=E (exit 11)"},
		run: withID("owner", nil, func(e *env, id string) int {
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
		usage:    "release ID --node N",
		short:    "give up a held id: released | not-owner | free",
		examples: []string{"fencepost release order-42 --node node-a   # released (exit 0)"},
		flags:    &releaseFlags,
		run: withID("release", &releaseFlags.Node, func(e *env, id string) int {
			return e.ownershipOp(func(o ownOps) int {
				if err := o.s.Release(o.ctx, id, releaseFlags.Node); err != nil {
					return e.fail(err)
				}
				e.emit("released")
				return exitOK
			})
		}),
	})
	register("guard", &command{
		usage:    "guard ID --node N --epoch E",
		short:    "check a holding: owner | fenced current=E | free",
		examples: []string{"fencepost guard order-42 --node node-a --epoch 1   # owner epoch=1 ... (exit 0), or fenced current=2 (exit 13)"},
		flags:    &guardFlags,
		run: withID("guard", &guardFlags.Node, func(e *env, id string) int {
			if guardFlags.Epoch == 0 {
				return e.usageErr("guard", "--epoch is required")
			}
			return e.ownershipOp(func(o ownOps) int {
				st, err := o.s.Guard(o.ctx, id, guardFlags.Node, uint64(guardFlags.Epoch))
				if err != nil {
					return e.fail(err)
				}
				e.emit("owner", f("epoch", st.Epoch), f("expires", st.Expires))
				return exitOK
			})
		}),
	})
	register("renew", &command{
		usage:    "renew ID --node N [--ttl 10s]",
		short:    "extend a live lease: renewed expires=T | held-by | free",
		examples: []string{"fencepost renew order-42 --node node-a --ttl 30s   # renewed expires=... epoch=1 (exit 0)"},
		flags:    &renewFlags,
		run: withID("renew", &renewFlags.Node, func(e *env, id string) int {
			return e.ownershipOp(func(o ownOps) int {
				l, err := o.s.Renew(o.ctx, id, renewFlags.Node, time.Duration(renewFlags.TTL))
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
		short: "take over an owned id, one whose lease lapsed (a crashed owner's) or, with --force, a live one: seized epoch=E | free | live | contended",
		examples: []string{
			"fencepost seize order-42 --node node-b           # seized epoch=2 ... when node-a's lease lapsed; live node=node-a ... (exit 15) while it lasts",
			"fencepost seize order-42 --node node-b --force   # seized epoch=2 ...: an operator takes a live id",
		},
		flags: &seizeFlags,
		run: withID("seize", &seizeFlags.Node, func(e *env, id string) int {
			return e.ownershipOp(func(o ownOps) int {
				l, err := o.s.Seize(o.ctx, id, seizeFlags.Node, time.Duration(seizeFlags.TTL), seizeFlags.Force)
				if err != nil {
					return e.fail(err)
				}
				e.emit("seized", f("epoch", l.Epoch), f("expires", l.Expires), f("node", l.Node))
				return exitOK
			})
		}),
	})
	register("reset", &command{
		usage:    "reset --yes",
		short:    "drop every record, epoch and mailbox of the world: cleared",
		examples: []string{"fencepost --world scratch reset --yes   # cleared world=scratch"},
		flags:    &resetFlags,
		run: func(e *env, args []string) int {
			if len(args) != 0 {
				return e.usageErr("reset", "takes no arguments")
			}
			if !resetFlags.Yes {
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

// withID checks the single positional ID (and --node where the command has
// one: node not nil) and runs fn.
func withID(name string, node *string, fn func(e *env, id string) int) func(e *env, args []string) int {
	return func(e *env, args []string) int {
		if len(args) != 1 {
			return e.usageErr(name, "want exactly one ID, got %d arguments", len(args))
		}
		if node != nil && *node == "" {
			return e.usageErr(name, "--node is required")
		}
		return fn(e, args[0])
	}
}
