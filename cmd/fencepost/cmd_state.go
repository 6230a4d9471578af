package main

import (
	"context"
	"encoding/base64"
	"unicode/utf8"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/internal/wire"
)

// The flags of state (one command runs per process).
var stateFlags struct {
	Delete bool      `name:"delete" help:"delete every key of the id's state (refused with held-by while a live holder has the id)"`
	Node   nodeValue `name:"node" placeholder:"N" default:"fencepost-state" help:"with --delete: the node that claims the id for the delete and releases it"`
}

func init() {
	register("state", &command{
		usage: "state ID [--delete [--node N]]",
		short: "show an id's per-id state (key ... lines, then state), or delete it: deleted | held-by",
		examples: []string{
			"fencepost state acct-1              # key key=balance value=75 per key, then state id=acct-1 cursor=17 keys=1",
			"fencepost state acct-1 --json       # the same as JSON objects; a value that is not UTF-8 is value_b64",
			"fencepost state acct-1 --delete     # deleted id=acct-1 keys=1 (held-by, exit 10, while a worker holds it)",
		},
		flags: &stateFlags,
		run:   runState,
	})
}

// runState prints an id's state as stored, the effect of every message up
// to its cursor and of none after it (docs/design.md 3.12):
//
//	key key=balance value=75
//	key key=blob value_b64=AAEC
//	state id=acct-1 cursor=17 keys=2
//
// With --delete it deletes every key in one batch fenced on a claim of
// the id by --node (refused with held-by, exit 10, while someone holds
// it), keeps the cursor, releases the id, and prints `deleted id=ID
// keys=K`. It writes nothing otherwise.
func runState(e *env, args []string) int {
	if len(args) != 1 {
		return e.usageErr("state", "want one ID, got %d arguments", len(args))
	}
	id := args[0]
	if err := wire.ValidateID(id); err != nil {
		return e.usageErr("state", "%v", err)
	}
	return e.worldOp(func(ctx context.Context, w *client.World) int {
		if stateFlags.Delete {
			keys, err := w.Mailboxes.DeleteState(ctx, id, string(stateFlags.Node))
			if err != nil {
				return e.fail(err)
			}
			e.emit("deleted", f("id", id), f("keys", len(keys)))
			return exitOK
		}
		st, err := w.Mailboxes.ReadState(ctx, id)
		if err != nil {
			return e.fail(err)
		}
		for _, k := range st.Keys() {
			v := st.Values[k]
			if utf8.Valid(v) {
				e.emit("key", f("key", k), f("value", string(v)))
			} else {
				e.emit("key", f("key", k), f("value_b64", base64.StdEncoding.EncodeToString(v)))
			}
		}
		fields := []field{f("id", id), f("cursor", st.Cursor), f("keys", len(st.Values))}
		if st.Deleted > 0 {
			// Deleted keys' markers, counted against the keys an id may use.
			fields = append(fields, f("deleted", st.Deleted))
		}
		e.emit("state", fields...)
		return exitOK
	})
}
