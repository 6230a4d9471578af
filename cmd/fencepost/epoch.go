package main

import (
	"errors"
	"fmt"

	"github.com/fencepost/fencepost/ownership"
)

func init() { outcomeMappers = append(outcomeMappers, neverIssuedOutcome) }

// givenEpoch is the --epoch of the command that runs (guard or drain: one
// command runs per process, the other's flags stay zero), 0 if none.
func givenEpoch() uint64 { return max(uint64(guardFlags.Epoch), uint64(drainFlags.Epoch)) }

// neverIssuedOutcome: a fenced answer to an epoch above the current one,
// which was never issued (epochs only grow, docs/contract.md section 1), keeps its
// word and code and says so: never_issued beside current, and on stderr
// what the current epoch is. An epoch below the current one is the
// ordinary fenced of a holding that was taken over. With --json the
// object says it all.
func neverIssuedOutcome(e *env, err error) (int, bool) {
	var fenced *ownership.FencedError
	given := givenEpoch()
	if !errors.As(err, &fenced) || given <= fenced.Current {
		return 0, false
	}
	e.emitUnit("fenced", f("current", fenced.Current), f("never_issued", true)) // shard=S in a sharded world
	if e.json {
		return exitFenced, true
	}
	fmt.Fprintf(e.err, "fencepost: epoch %d of %q was never issued: its current epoch is %d (held by node %s), and epochs only grow\n", given, fenced.ID, fenced.Current, quoteIfNeeded(fenced.Holder))
	return exitFenced, true
}
