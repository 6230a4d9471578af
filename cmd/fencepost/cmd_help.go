package main

import (
	"fmt"
	"sort"
	"strings"

	"github.com/alecthomas/kong"
)

func init() {
	register("help", &command{
		usage:    "help [COMMAND]",
		short:    "the commands, or one command's flags and examples (as COMMAND --help)",
		examples: []string{"fencepost help claim"},
		run:      runHelp,
	})
	register("completion", &command{
		usage: "completion bash|zsh|fish",
		short: "print a shell completion script (commands, flags, world and dlq operations)",
		examples: []string{
			"source <(fencepost completion bash)                                  # bash, this shell; or into /etc/bash_completion.d/fencepost",
			"fencepost completion zsh > \"${fpath[1]}/_fencepost\"                  # zsh, then a new shell",
			"fencepost completion fish > ~/.config/fish/completions/fencepost.fish   # fish",
		},
		run: runCompletion,
	})
	register("__complete", &command{
		usage:  "__complete -- WORD...",
		short:  "the completions of the last WORD of a command line (the completion scripts call it)",
		hidden: true,
		run:    runComplete,
	})
}

func runHelp(e *env, args []string) int {
	switch {
	case len(args) == 0:
		printUsage(e.out)
		return exitOK
	case len(args) > 1:
		return e.usageErr("help", "want one COMMAND, got %d arguments", len(args))
	}
	node := commandNode(parser(), args[0])
	if node == nil {
		return (&usageError{unknown: args[0]}).print(e.err)
	}
	printCommandHelp(e.out, node)
	return exitOK
}

// The completion scripts ask the binary (`fencepost __complete -- WORDS`)
// for the candidates of the word under the cursor, so that they know
// every command and flag of the binary they run, and stay three lines.
var completionScripts = map[string]string{
	"bash": `# fencepost completion for bash: source <(fencepost completion bash)
_fencepost() {
	local IFS=$'\n'
	COMPREPLY=($("${COMP_WORDS[0]}" __complete -- "${COMP_WORDS[@]:1:COMP_CWORD}" 2>/dev/null))
}
complete -o default -F _fencepost fencepost
`,
	"zsh": `#compdef fencepost
# fencepost completion for zsh: fencepost completion zsh > "${fpath[1]}/_fencepost"
_fencepost() {
	local -a cands
	cands=(${(f)"$(${words[1]} __complete -- "${(@)words[2,CURRENT]}" 2>/dev/null)"})
	if (( ${#cands} )); then
		compadd -a cands
	else
		_files
	fi
}
if [[ $zsh_eval_context[-1] == loadautofunc ]]; then
	_fencepost "$@"
else
	compdef _fencepost fencepost
fi
`,
	"fish": `# fencepost completion for fish: fencepost completion fish > ~/.config/fish/completions/fencepost.fish
function __fencepost_complete
	set -l words (commandline -opc)
	set -l cur (commandline -ct)
	$words[1] __complete -- $words[2..-1] "$cur" 2>/dev/null
end
complete -c fencepost -f -a '(__fencepost_complete)'
`,
}

func runCompletion(e *env, args []string) int {
	if len(args) != 1 || completionScripts[args[0]] == "" {
		return e.usageErr("completion", "want bash, zsh or fish")
	}
	fmt.Fprint(e.out, completionScripts[args[0]])
	return exitOK
}

// runComplete prints the candidates for the last of args (the word under
// the cursor, maybe empty), one a line: commands, then the flags of the
// command and the global ones, the operations of world and dlq, the
// commands again after help, the shells after completion, after a flag
// the values its `complete` tag lists. Nothing after another flag that
// takes a value: the shell completes file names there.
func runComplete(e *env, args []string) int {
	if len(args) == 0 {
		args = []string{""}
	}
	for _, c := range completions(parser(), args[:len(args)-1], args[len(args)-1]) {
		fmt.Fprintln(e.out, c)
	}
	return exitOK
}

func completions(k *kong.Kong, before []string, cur string) []string {
	known := flagTable(k.Model.Node)
	var cmd string
	var positional []string
	for i := 0; i < len(before); i++ {
		w := before[i]
		if len(w) > 1 && w[0] == '-' {
			name, _, hasVal := strings.Cut(strings.TrimPrefix(w[1:], "-"), "=")
			if f := known[name]; f != nil && !f.IsBool() && !hasVal {
				if i == len(before)-1 { // cur is this flag's value
					return withPrefix(strings.Split(f.Tag.Get("complete"), ","), cur)
				}
				i++
			}
			continue
		}
		if cmd == "" {
			cmd = w
			if node := commandNode(k, w); node != nil {
				for n, f := range flagTable(node) {
					known[n] = f
				}
			}
			continue
		}
		positional = append(positional, w)
	}
	var cands []string
	switch {
	case strings.HasPrefix(cur, "-"):
		for name := range known {
			cands = append(cands, "--"+name)
		}
	case cmd == "", cmd == "help" && len(positional) == 0:
		cands = commandNames()
	case cmd == "completion" && len(positional) == 0:
		cands = []string{"bash", "fish", "zsh"}
	case cmd == "world" && len(positional) == 0:
		cands = []string{"add", "info", "ls", "rm"}
	case cmd == "dlq" && len(positional) == 0:
		cands = []string{"ls", "purge", "repost"}
	}
	return withPrefix(cands, cur)
}

// withPrefix are the candidates that start with cur, sorted.
func withPrefix(cands []string, cur string) []string {
	var out []string
	for _, c := range cands {
		if c != "" && strings.HasPrefix(c, cur) {
			out = append(out, c)
		}
	}
	sort.Strings(out)
	return out
}
