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
		shardFlag
	}
	ownerFlags   struct{ shardFlag }
	releaseFlags struct {
		nodeFlag
		shardFlag
	}
	guardFlags struct {
		nodeFlag
		Epoch epochValue `name:"epoch" placeholder:"E" help:"the epoch to check (required)"`
		shardFlag
	}
	renewFlags struct {
		nodeFlag
		ttlFlag
		shardFlag
	}
	seizeFlags struct {
		nodeFlag
		ttlFlag
		Force bool `name:"force" help:"take a live id (operator)"`
		shardFlag
	}
	resetFlags struct {
		Yes bool `name:"yes" help:"confirm"`
	}
)

func init() {
	register("claim", &command{
		usage: "claim ID --node N [--ttl 10s]   (--shard S for ID: a shard of a sharded world)",
		short: "take a free id (in a sharded world, its shard): claimed epoch=E [shard=S] expires=T | held-by",
		examples: []string{
			"fencepost claim order-42 --node node-a --ttl 30s   # claimed epoch=1 expires=... (exit 0), or held-by node=... (exit 10)",
			"fencepost --world orders claim order-42 --node node-a --json",
			"fencepost --world sharded claim order-42 --node node-a   # claimed epoch=5 shard=17 expires=...: order-42's shard, in a sharded world",
			"fencepost --world sharded claim --shard 17 --node node-a   # the same, the shard named",
		},
		flags: &claimFlags,
		run: withUnit("claim", &claimFlags.Node, &claimFlags.Shard, nil, func(e *env, o ownOps) int {
			l, err := o.s.Claim(o.ctx, o.u.Name, claimFlags.Node, time.Duration(claimFlags.TTL))
			if err != nil {
				return e.fail(err)
			}
			e.emitUnit("claimed", f("epoch", l.Epoch), f("expires", l.Expires), f("node", l.Node))
			return exitOK
		}),
	})
	register("owner", &command{
		usage:    "owner ID   (--shard S for ID)",
		short:    "who holds an id (in a sharded world, its shard): owned-by node=N epoch=E [shard=S] expires=T | free epoch=E",
		examples: []string{"fencepost owner order-42   # owned-by node=node-a epoch=1 expires=... (exit 0), or free epoch=E (exit 11)"},
		flags:    &ownerFlags,
		run: withUnit("owner", nil, &ownerFlags.Shard, nil, func(e *env, o ownOps) int {
			st, err := o.s.Owner(o.ctx, o.u.Name)
			if err != nil {
				return e.fail(err)
			}
			if !st.Held {
				e.emitUnit("free", f("epoch", st.Epoch))
				return exitFree
			}
			e.emitUnit("owned-by", f("node", st.Node), f("epoch", st.Epoch), f("expires", st.Expires))
			return exitOK
		}),
	})
	register("release", &command{
		usage:    "release ID --node N   (--shard S for ID)",
		short:    "give up a held id (in a sharded world, its shard): released | not-owner | free",
		examples: []string{"fencepost release order-42 --node node-a   # released (exit 0)"},
		flags:    &releaseFlags,
		run: withUnit("release", &releaseFlags.Node, &releaseFlags.Shard, nil, func(e *env, o ownOps) int {
			if err := o.s.Release(o.ctx, o.u.Name, releaseFlags.Node); err != nil {
				return e.fail(err)
			}
			e.emitUnit("released")
			return exitOK
		}),
	})
	register("guard", &command{
		usage:    "guard ID --node N --epoch E   (--shard S for ID)",
		short:    "check a holding (in a sharded world, of the id's shard): owner | fenced current=E | free",
		examples: []string{"fencepost guard order-42 --node node-a --epoch 1   # owner epoch=1 ... (exit 0), or fenced current=2 (exit 13)"},
		flags:    &guardFlags,
		run: withUnit("guard", &guardFlags.Node, &guardFlags.Shard, func() string {
			if guardFlags.Epoch == 0 {
				return "--epoch is required"
			}
			return ""
		}, func(e *env, o ownOps) int {
			st, err := o.s.Guard(o.ctx, o.u.Name, guardFlags.Node, uint64(guardFlags.Epoch))
			if err != nil {
				return e.fail(err)
			}
			e.emitUnit("owner", f("epoch", st.Epoch), f("expires", st.Expires))
			return exitOK
		}),
	})
	register("renew", &command{
		usage:    "renew ID --node N [--ttl 10s]   (--shard S for ID)",
		short:    "extend a live lease (in a sharded world, the id's shard's): renewed expires=T | held-by | free",
		examples: []string{"fencepost renew order-42 --node node-a --ttl 30s   # renewed expires=... epoch=1 (exit 0)"},
		flags:    &renewFlags,
		run: withUnit("renew", &renewFlags.Node, &renewFlags.Shard, nil, func(e *env, o ownOps) int {
			l, err := o.s.Renew(o.ctx, o.u.Name, renewFlags.Node, time.Duration(renewFlags.TTL))
			if err != nil {
				return e.fail(err)
			}
			e.emitUnit("renewed", f("expires", l.Expires), f("epoch", l.Epoch))
			return exitOK
		}),
	})
	register("seize", &command{
		usage: "seize ID --node N [--ttl 10s] [--force]   (--shard S for ID)",
		short: "take over an owned id (in a sharded world, its shard), one whose lease lapsed (a crashed owner's) or, with --force, a live one: seized epoch=E | free | live | contended",
		examples: []string{
			"fencepost seize order-42 --node node-b           # seized epoch=2 ... when node-a's lease lapsed; live node=node-a ... (exit 15) while it lasts",
			"fencepost seize order-42 --node node-b --force   # seized epoch=2 ...: an operator takes a live id",
		},
		flags: &seizeFlags,
		run: withUnit("seize", &seizeFlags.Node, &seizeFlags.Shard, nil, func(e *env, o ownOps) int {
			l, err := o.s.Seize(o.ctx, o.u.Name, seizeFlags.Node, time.Duration(seizeFlags.TTL), seizeFlags.Force)
			if err != nil {
				return e.fail(err)
			}
			e.emitUnit("seized", f("epoch", l.Epoch), f("expires", l.Expires), f("node", l.Node))
			return exitOK
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
