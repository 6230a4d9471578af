// Command fencepost is the client of a fencepost deployment: ownership
// operations, mailboxes, worlds. Every outcome prints its word first and
// exits with the code of SPEC section 6; --json prints one object per
// outcome.
package main

import (
	"fmt"
	"os"
	"sort"
)

// Exit codes (SPEC section 6). Public contract: never change one.
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
)

// command is one subcommand. run gets the parsed environment and returns the
// exit code.
type command struct {
	usage string // e.g. "claim ID --node N [--ttl 10s]"
	short string
	flags func(fs *flagSet)               // declares the command's own flags
	run   func(e *env, args []string) int // args are the positional arguments
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

func run(argv []string) int {
	if len(argv) == 0 || argv[0] == "-h" || argv[0] == "--help" || argv[0] == "help" {
		printUsage(os.Stdout)
		if len(argv) == 0 {
			return exitUsage
		}
		return exitOK
	}
	if argv[0] == "bench" && benchExec != nil {
		return benchExec(argv)
	}
	c, ok := commands[argv[0]]
	if !ok {
		fmt.Fprintf(os.Stderr, "fencepost: unknown command %q\n\n", argv[0])
		printUsage(os.Stderr)
		return exitUsage
	}
	e, args, code := parse(argv[0], c, argv[1:])
	if e == nil {
		return code
	}
	defer e.close()
	return c.run(e, args)
}

func printUsage(w *os.File) {
	fmt.Fprintln(w, "usage: fencepost COMMAND [ARGS] [--server URL] [--world W] [--json] [--timeout D]")
	fmt.Fprintln(w, "\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-48s %s\n", commands[n].usage, commands[n].short)
	}
	fmt.Fprintln(w, "\nexit codes: 0 success, 10 held-by, 11 free, 12 not-owner, 13 fenced,")
	fmt.Fprintln(w, "14 contended, 15 live, 16 full, 1 error, 2 usage, 3 self-fence")
}
