package main

import (
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/world"
)

// outcomeMappers turn a package's typed outcome errors into the CLI's word,
// fields and exit code. Packages register theirs from their command files.
var outcomeMappers []func(e *env, err error) (int, bool)

// fail reports a refusal outcome or an error, and returns the exit code.
func (e *env) fail(err error) int {
	if np := e.refusalOf(); np != nil {
		// Refused by the server's permissions: whatever the operation
		// returned (a timeout, a cancelled context), this is why.
		e.errorOut("error", np)
		return exitError
	}
	return e.outcome(err)
}

// outcome reports the refusal outcome or error that err is, and returns
// the exit code.
func (e *env) outcome(err error) int {
	for _, m := range outcomeMappers {
		if code, ok := m(e, err); ok {
			return code
		}
	}
	var (
		held     *ownership.HeldError
		free     *ownership.FreeError
		notOwner *ownership.NotOwnerError
		fenced   *ownership.FencedError
		live     *ownership.LiveError
	)
	switch {
	// The ownership refusals name the shard in a sharded world
	// (emitUnit); in a per-id world they print as they always have.
	case errors.As(err, &held):
		e.emitUnit("held-by", f("node", held.Node), f("epoch", held.Epoch), f("expires", held.Expires))
		return exitHeldBy
	case errors.As(err, &free):
		e.emitUnit("free", f("epoch", free.LastEpoch))
		return exitFree
	case errors.As(err, &notOwner):
		e.emitUnit("not-owner", f("node", notOwner.Holder), f("epoch", notOwner.Epoch))
		return exitNotOwner
	case errors.As(err, &fenced):
		e.emitUnit("fenced", f("current", fenced.Current))
		return exitFenced
	case errors.As(err, &live):
		e.emitUnit("live", f("node", live.Node), f("epoch", live.Epoch), f("expires", live.Expires))
		return exitLive
	case errors.Is(err, ownership.ErrContended):
		e.emitUnit("contended")
		return exitContended
	case errors.Is(err, ownership.ErrUnknown):
		e.errorOut("unknown", err)
		return exitError
	}
	e.errorOut("error", err)
	return exitError
}

// errorOut prints an error: on stderr as text, on stdout as an object with
// --json so that scripts read one stream.
func (e *env) errorOut(word string, err error) {
	msg := err.Error() + hint(err, e.world)
	if e.json {
		e.emit(word, f("error", msg))
		return
	}
	fmt.Fprintf(e.err, "%s: %s\n", word, msg)
}

// hint is what the user can do about err, if the CLI knows: the packages'
// errors say what happened, the CLI says which command helps. name is
// the --world name.
func hint(err error, name string) string {
	var unknown *world.UnknownWorldError
	switch {
	case errors.As(err, &unknown) && unknown.Missing != "":
		return fmt.Sprintf("; recreate it with `fencepost world add %s`", unknown.Name)
	case errors.As(err, &unknown):
		return fmt.Sprintf("; create it with `fencepost world add %s`", unknown.Name)
	case errors.Is(err, world.ErrNoState):
		return fmt.Sprintf("; run `fencepost world add %s` again: it keeps the world's settings and turns them on", name)
	case errors.Is(err, nats.ErrNoServers):
		return "; is fencepostd running? (--server or NATS_URL says where; the default is nats://127.0.0.1:4222)"
	}
	return ""
}

// usageErr reports wrong arguments.
func (e *env) usageErr(c string, format string, a ...any) int {
	fmt.Fprintf(e.err, "fencepost %s: %s\nusage: fencepost %s\n", c, fmt.Sprintf(format, a...), commands[c].usage)
	return exitUsage
}
