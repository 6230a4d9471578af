// Command fencepost is the client of a fencepost deployment: ownership
// operations, mailboxes, worlds. Every outcome prints its word first and
// exits with the code of docs/contract.md section 6; --json prints one object per
// outcome. The command line is parsed by kong (cli.go); the global flags
// go before or after the command.
package main

import (
	"fmt"
	"io"
	"os"
	"sort"
)

// Exit codes (docs/contract.md section 6). Public contract: never change one.
const (
	exitOK        = 0
	exitError     = 1
	exitUsage     = 2
	exitSelfFence = 3
	exitHeldBy    = 10
	exitFree      = 11
	exitNotOwner  = 12
	exitFenced    = 13
	exitContended = 14
	exitLive      = 15
	exitFull      = 16
	// A call's outcomes (docs/contract.md section 11): no answer in time
	// (unknown), and dead-lettered.
	exitCallTimeout = 17
	exitCallFailed  = 18
)

// command is one subcommand. run gets the parsed environment and returns the
// exit code.
type command struct {
	usage    string   // e.g. "claim ID --node N [--ttl 10s]"
	short    string   // one line: what it does and its outcomes
	long     string   // more, for `help COMMAND` (optional): lines, each ending in \n
	examples []string // command lines shown by `help COMMAND`, each with a comment
	// flags is the command's own flags: a pointer to a struct whose
	// fields carry kong's tags (nil: none). One command runs per process,
	// so the struct is a package variable its run function reads.
	flags  any
	hidden bool                            // not listed (__complete)
	run    func(e *env, args []string) int // args are the positional arguments
}

var commands = map[string]*command{}

func register(name string, c *command) { commands[name] = c }

// ownerProcess, set by the bench build (cmd_bench.go), runs a bench owner
// process instead of the CLI when this executable was started as one.
var ownerProcess = func() {}

// benchExec, set by a build without the bench (cmd_bench_exec.go), runs
// `fencepost bench` in the fencepost-bench binary.
var benchExec func(argv []string) int

func main() {
	ownerProcess()
	os.Exit(run(os.Args[1:]))
}

func printUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: fencepost [GLOBAL FLAGS] COMMAND [ARGS] [FLAGS]")
	fmt.Fprintln(w, "\ncommands:")
	for _, n := range commandNames() {
		fmt.Fprintf(w, "  %-48s %s\n", commands[n].usage, commands[n].short)
	}
	fmt.Fprintln(w, "\nglobal flags (before or after the command):")
	printFlags(w, parser().Model.Flags)
	fmt.Fprintf(w, "  %-28s %s\n", "-h, --help", "this help; COMMAND --help: the command's")
	fmt.Fprintln(w, "\n`fencepost help COMMAND` shows a command's flags and examples.")
	fmt.Fprintln(w, "\nexit codes: 0 success, 10 held-by, 11 free, 12 not-owner, 13 fenced,")
	fmt.Fprintln(w, "14 contended, 15 live, 16 full, 17 timeout, 18 failed, 1 error, 2 usage,")
	fmt.Fprintln(w, "3 self-fence")
}

// commandNames are the listed commands, sorted.
func commandNames() []string {
	names := make([]string, 0, len(commands))
	for n, c := range commands {
		if !c.hidden {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}
