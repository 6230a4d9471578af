package main

import (
	"context"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/ownership"
)

type ownOps struct {
	ctx context.Context
	s   *ownership.Store
	w   *client.World
	// u is the unit the command acts on: its ID, or in a sharded world
	// the ID's shard or the --shard named (u.Name is what s takes).
	u client.Unit
}

// ownershipOp opens the world and runs fn with its ownership store.
func (e *env) ownershipOp(fn func(o ownOps) int) int {
	ctx, cancel := e.ctx()
	defer cancel()
	w, err := e.openWorld(ctx)
	if err != nil {
		return e.fail(err)
	}
	return fn(ownOps{ctx: ctx, s: w.Ownership, w: w})
}

// withUnit checks the command line of an ownership command - one ID, or
// --shard N (the command's shard flag) and no ID; --node where the
// command has one (node not nil); then check's usage error, if any -
// opens the world, finds the unit the command acts on
// (client.World.Unit: the ID itself in a per-id world, its shard in a
// sharded one; or the --shard named) and runs fn. A --shard the world
// does not have (a per-id world, or a number past its shards) is a usage
// error: nothing is written.
func withUnit(name string, node *string, shard *shardValue, check func() string, fn func(e *env, o ownOps) int) func(e *env, args []string) int {
	return func(e *env, args []string) int {
		byShard := e.given["shard"]
		switch {
		case byShard && len(args) != 0:
			return e.usageErr(name, "give an ID or --shard S, not both")
		case !byShard && len(args) != 1:
			return e.usageErr(name, "want exactly one ID (or --shard S in a sharded world), got %d arguments", len(args))
		case node != nil && *node == "":
			return e.usageErr(name, "--node is required")
		}
		if check != nil {
			if msg := check(); msg != "" {
				return e.usageErr(name, "%s", msg)
			}
		}
		return e.ownershipOp(func(o ownOps) int {
			var err error
			if byShard {
				if o.u, err = o.w.ShardUnit(int(*shard)); err != nil {
					return e.usageErr(name, "--shard %d: %v", *shard, err)
				}
			} else if o.u, err = o.w.Unit(args[0]); err != nil {
				return e.fail(err)
			}
			e.sharded, e.shard = o.u.Sharded(), o.u.Shard
			return fn(e, o)
		})
	}
}

// shardFlag is --shard, in place of ID (given["shard"] says whether it
// was given: 0 is a shard).
type shardFlag struct {
	Shard shardValue `name:"shard" placeholder:"S" help:"a shard of a sharded world (0..shards-1), in place of ID"`
}

// unitFields are an ownership outcome's fields with the shard the command
// acted on, in a sharded world: after epoch (claimed epoch=5 shard=17
// expires=...), or last when there is no epoch. In a per-id world they
// are the fields as given.
func (e *env) unitFields(fields []field) []field {
	if !e.sharded {
		return fields
	}
	for i, fl := range fields {
		if fl.key == "epoch" {
			return append(fields[:i+1:i+1], append([]field{f("shard", e.shard)}, fields[i+1:]...)...)
		}
	}
	return append(fields, f("shard", e.shard))
}

// emitUnit prints an ownership outcome (emit) naming the shard in a
// sharded world (unitFields).
func (e *env) emitUnit(word string, fields ...field) {
	e.emit(word, e.unitFields(fields)...)
}
