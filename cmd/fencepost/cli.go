package main

import (
	"fmt"
	"io"
	"maps"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/alecthomas/kong"

	"github.com/fencepost/fencepost/internal/buildinfo"
)

// globals are the flags of every command, given before or after it
// (`fencepost --world w send ID BODY` = `fencepost send ID BODY --world w`).
// The defaults that come from the environment are kong variables read
// with envOr, so that an empty variable counts as unset, as it always did.
type globals struct {
	Server      string           `default:"${server}" placeholder:"URL" help:"NATS server URL(s), comma-separated (env NATS_URL)"`
	Creds       string           `placeholder:"FILE" help:"NATS credentials file (its user's own inbox prefix, if its permissions confine replies to one, is used)"`
	InboxPrefix string           `name:"inbox-prefix" placeholder:"PREFIX" help:"prefix of the reply subjects (default: the one --creds permits, else _INBOX)"`
	User        string           `placeholder:"USER" help:"NATS user"`
	Password    string           `placeholder:"PASSWORD" help:"NATS password"`
	TLSCert     string           `name:"tlscert" placeholder:"FILE" help:"client TLS certificate"`
	TLSKey      string           `name:"tlskey" placeholder:"FILE" help:"client TLS key"`
	TLSCA       string           `name:"tlsca" placeholder:"FILE" help:"CA certificate to verify the server"`
	World       string           `default:"${world}" placeholder:"W" help:"world (env FENCEPOST_WORLD)"`
	JSON        bool             `name:"json" help:"print one JSON object per outcome"`
	Timeout     time.Duration    `default:"5s" placeholder:"D" help:"time limit of the operation"`
	LogLevel    string           `name:"log-level" complete:"debug,info,warn,error" default:"${loglevel}" placeholder:"LEVEL" help:"log level: debug, info, warn, error (env FENCEPOST_LOG)"`
	Version     kong.VersionFlag `help:"print the version and exit"`
}

// grammar is one command as kong sees it: its flags and its positional
// arguments. The arguments are the command's to check (their count and
// its words are the command's usage errors).
type grammar struct {
	Flags any      `embed:""`
	Args  []string `arg:"" optional:""`
}

// cliVars are kong variables of the commands' flags (${name} in a tag),
// set by their init functions.
var cliVars = kong.Vars{}

var (
	cliGlobals  globals
	cliGrammars = map[string]*grammar{}
	cliParser   *kong.Kong
	cliOnce     sync.Once
)

// parser is the kong parser of every registered command (built once:
// init functions register the commands).
func parser() *kong.Kong {
	cliOnce.Do(func() {
		opts := []kong.Option{
			kong.Name("fencepost"),
			kong.Vars{
				"server":   envOr("NATS_URL", "nats://127.0.0.1:4222"),
				"world":    envOr("FENCEPOST_WORLD", "default"),
				"loglevel": envOr("FENCEPOST_LOG", "warn"),
				"version":  "fencepost " + version(),
				"ls_limit": strconv.Itoa(defaultLsLimit),
			}.CloneWith(cliVars),
			kong.Help(printHelp),
			kong.Exit(func(code int) { panic(exitNow(code)) }),
			kong.Writers(os.Stdout, os.Stderr),
		}
		for _, name := range sortedNames() {
			c := commands[name]
			flags := c.flags
			if flags == nil {
				flags = &struct{}{}
			}
			g := &grammar{Flags: flags}
			cliGrammars[name] = g
			opts = append(opts, kong.DynamicCommand(name, c.short, "", g))
		}
		k, err := kong.New(&cliGlobals, opts...)
		if err != nil {
			panic(err) // a grammar's tags are wrong: a bug, caught by every test
		}
		cliParser = k
	})
	return cliParser
}

func sortedNames() []string {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// exitNow is kong's exit (after --help, --version) as a panic that run
// recovers: the exit code goes back through run, deferred calls run.
type exitNow int

func run(argv []string) (code int) {
	if len(argv) == 0 {
		printUsage(os.Stdout)
		return exitUsage
	}
	k := parser()
	ln, uerr := normalise(k, argv)
	switch {
	case uerr != nil:
		return uerr.print(os.Stderr)
	case ln.cmd == "bench" && benchExec != nil:
		return benchExec(argv)
	case ln.cmd == "" && !ln.help && !ln.given["version"]:
		return (&usageError{msg: "want a command"}).print(os.Stderr)
	}
	defer func() {
		if r := recover(); r != nil {
			x, ok := r.(exitNow)
			if !ok {
				panic(r)
			}
			code = int(x)
		}
	}()
	if _, err := k.Parse(ln.argv); err != nil {
		return (&usageError{cmd: ln.cmd, msg: err.Error()}).print(os.Stderr)
	}
	e, code := newEnv(ln)
	if e == nil {
		return code
	}
	defer e.close()
	return commands[ln.cmd].run(e, cliGrammars[ln.cmd].Args)
}

// line is a command line made ready for kong.
type line struct {
	cmd   string          // the command, "" if none was given
	argv  []string        // the command, its flags as --name[=value], then -- and the positional arguments
	given map[string]bool // the flags given on the command line, by name
	help  bool            // -h, -help or --help
}

// normalise reads argv as the CLI always has (flag.FlagSet's grammar) and
// writes it the way kong reads it:
//   - flags and positional arguments in any order: `claim ID --node N`
//     and `send ID --from F BODY` (kong wants a command's positional
//     arguments together: here they go last, after --);
//   - a flag's value is the next argument whatever it starts with
//     (`--max -1` is refused by --max, not read as a flag);
//   - -name is --name;
//   - an argument that starts with '-' and is no flag is a usage error
//     that says to put -- before it (a body "-1"), not kong's -h
//     (help) from "-hello";
//   - after --, everything is an argument.
func normalise(k *kong.Kong, argv []string) (line, *usageError) {
	ln := line{given: map[string]bool{}}
	known := flagTable(k.Model.Node)
	var flags, args []string
	for i := 0; i < len(argv); i++ {
		a := argv[i]
		switch {
		case a == "--" && ln.cmd == "":
			return ln, &usageError{msg: "want a COMMAND before --"}
		case a == "--":
			args = append(args, argv[i+1:]...)
			i = len(argv)
		case len(a) < 2 || a[0] != '-':
			if ln.cmd != "" {
				args = append(args, a)
				continue
			}
			node := commandNode(k, a)
			if node == nil {
				return ln, &usageError{unknown: a}
			}
			ln.cmd = a
			if a == "bench" && benchExec != nil {
				return ln, nil // fencepost-bench reads the whole line
			}
			maps.Copy(known, flagTable(node))
		default:
			flag, used, uerr := ln.flag(known, argv[i:])
			if uerr != nil {
				return ln, uerr
			}
			if flag != "" {
				flags = append(flags, flag)
			}
			i += used - 1
		}
	}
	if ln.cmd != "" {
		ln.argv = append(ln.argv, ln.cmd)
	}
	ln.argv = append(ln.argv, flags...)
	if ln.help {
		ln.argv = append(ln.argv, "--help")
	}
	ln.argv = append(append(ln.argv, "--"), args...)
	return ln, nil
}

// flag reads the flag at rest[0] (its value may be rest[1]) as
// --name[=value] and says how many arguments it used; -h and --help set
// help and give no flag.
func (ln *line) flag(known map[string]*kong.Flag, rest []string) (string, int, *usageError) {
	name, val, hasVal := strings.Cut(strings.TrimPrefix(rest[0][1:], "-"), "=")
	if name == "h" || name == "help" {
		ln.help = true
		return "", 1, nil
	}
	f := known[name]
	if f == nil {
		return "", 0, &usageError{cmd: ln.cmd, msg: "flag provided but not defined: -" + name, hint: dashHint(ln.cmd, "-"+name)}
	}
	ln.given[f.Name] = true
	used := 1
	if !hasVal && !f.IsBool() {
		if len(rest) < 2 {
			return "", 0, &usageError{cmd: ln.cmd, msg: fmt.Sprintf("flag --%s needs a value: --%s %s", f.Name, f.Name, f.FormatPlaceHolder())}
		}
		val, hasVal, used = rest[1], true, 2
	}
	if !hasVal {
		return "--" + f.Name, used, nil
	}
	return "--" + f.Name + "=" + val, used, nil
}

// flagTable is the flags of node (not its parents') by name.
func flagTable(node *kong.Node) map[string]*kong.Flag {
	t := map[string]*kong.Flag{}
	for _, f := range node.Flags {
		t[f.Name] = f
	}
	return t
}

func commandNode(k *kong.Kong, name string) *kong.Node {
	for _, n := range k.Model.Children {
		if n.Type == kong.CommandNode && n.Name == name {
			return n
		}
	}
	return nil
}

// usageError is a command line the CLI cannot run (exit 2).
type usageError struct {
	cmd, msg, hint string
	unknown        string // an unknown command
}

func (u *usageError) print(w io.Writer) int {
	switch {
	case u.unknown != "":
		fmt.Fprintf(w, "fencepost: unknown command %q%s\n", u.unknown, didYouMean(u.unknown, commandNames()))
		fmt.Fprintln(w, "usage: fencepost [GLOBAL FLAGS] COMMAND [ARGS] [FLAGS] (fencepost help lists the commands)")
	case u.cmd == "":
		fmt.Fprintf(w, "fencepost: %s%s\n", u.msg, u.hint)
		fmt.Fprintln(w, "usage: fencepost [GLOBAL FLAGS] COMMAND [ARGS] [FLAGS] (fencepost help lists the commands)")
	default:
		fmt.Fprintf(w, "fencepost %s: %s%s\nusage: fencepost %s\n", u.cmd, u.msg, u.hint, commands[u.cmd].usage)
	}
	return exitUsage
}

// didYouMean names the words of names closest to word, a mistyped one:
// those it is a prefix of, else those one or two edits away (a letter
// added, dropped, changed, or two swapped); "" when none is.
func didYouMean(word string, names []string) string {
	var near []string
	for _, n := range names {
		if len(word) >= 2 && strings.HasPrefix(n, word) {
			near = append(near, n)
		}
	}
	for d := 1; d <= 2 && len(near) == 0; d++ {
		for _, n := range names {
			if editDistance(word, n) == d && d < len(n) {
				near = append(near, n)
			}
		}
	}
	if len(near) == 0 {
		return ""
	}
	return "; did you mean " + strings.Join(near, " or ") + "?"
}

// editDistance is the optimal string alignment distance of a and b: the
// fewest insertions, deletions, substitutions and swaps of two adjacent
// bytes that turn one into the other.
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// dashHint, for a flag the command does not have, says how to pass an
// argument that starts with '-' (a body "-1", an id "-x"): after --.
func dashHint(name, arg string) string {
	switch name {
	case "":
		return ""
	case "send":
		return fmt.Sprintf("\nif %s is the BODY, put -- before it: fencepost send ID -- %s", arg, arg)
	}
	return fmt.Sprintf("\nif %s is an argument, not a flag, put -- before it: fencepost %s -- %s", arg, name, arg)
}

// printHelp is kong's help (--help, -h, help COMMAND): the command's
// usage, its flags, the global flags and its examples; without a
// command, the list of commands.
func printHelp(_ kong.HelpOptions, ctx *kong.Context) error {
	node := ctx.Selected()
	if node == nil {
		printUsage(ctx.Stdout)
		return nil
	}
	printCommandHelp(ctx.Stdout, node)
	return nil
}

func printCommandHelp(w io.Writer, node *kong.Node) {
	c := commands[node.Name]
	fmt.Fprintf(w, "usage: fencepost %s\n%s\n", c.usage, c.short)
	if c.long != "" {
		fmt.Fprintf(w, "\n%s", c.long)
	}
	if len(node.Flags) > 0 {
		fmt.Fprintln(w, "\nflags:")
		printFlags(w, node.Flags)
	}
	fmt.Fprintln(w, "\nglobal flags (before or after the command):")
	printFlags(w, node.Parent.Flags)
	fmt.Fprintf(w, "  %-28s %s\n", "-h, --help", "this help")
	if len(c.examples) > 0 {
		fmt.Fprintln(w, "\nexamples:")
		for _, ex := range c.examples {
			fmt.Fprintf(w, "  %s\n", ex)
		}
	}
}

func printFlags(w io.Writer, flags []*kong.Flag) {
	for _, f := range flags {
		if f.Hidden || f.Name == "help" {
			continue
		}
		name := "--" + f.Name
		if f.Short != 0 {
			name = fmt.Sprintf("-%c, %s", f.Short, name)
		}
		if !f.IsBool() {
			name += " " + f.FormatPlaceHolder()
		}
		help := f.Help
		if f.HasDefault && f.Default != "" && !f.IsBool() {
			help += fmt.Sprintf(" (default %s)", f.Default)
		}
		fmt.Fprintf(w, "  %-28s %s\n", name, help)
	}
}

// version is the module's version this binary was built from
// (buildinfo.Version).
func version() string { return buildinfo.Version() }
