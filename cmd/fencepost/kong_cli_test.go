package main_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// nowhere is a server URL nothing answers at and a world that does not
// exist: a command that works with them in its environment took the
// flags it was given.
const (
	nowhere = "nats://127.0.0.1:1"
	noWorld = "no-such-world"
)

// TestCLI_GlobalFlags_BeforeAndAfter: --server, --world, --json, --timeout
// and --log-level work before the command and after it (before kong,
// `fencepost --server URL owner x` was an unknown command, exit 2).
func TestCLI_GlobalFlags_BeforeAndAfter(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{MinTTL: time.Second})
	g := []string{"--world", w.Name, "--server", env.URL, "--timeout", "10s", "--log-level", "warn"}
	with := func(before bool, args ...string) []string {
		if before {
			return append(append([]string{}, g...), args...)
		}
		return append(append([]string{}, args...), g...)
	}
	for _, before := range []bool{true, false} {
		r := cli(t, nowhere, noWorld, with(before, "send", "x", "hello")...)
		require.Equal(t, 0, r.code, "before=%v: %+v", before, r)
		require.Regexp(t, `^posted seq=\d+\n$`, r.out)
	}
	r := cli(t, nowhere, noWorld, with(true, "claim", "x", "--node", "n1")...)
	require.Equal(t, 0, r.code, "%+v", r)
	r = cli(t, nowhere, noWorld, with(false, "owner", "x")...)
	require.Equal(t, 0, r.code, "%+v", r)
	require.True(t, strings.HasPrefix(r.out, "owned-by node=n1 epoch=1 "), r.out)

	// --json before the command, and between its arguments.
	r = cli(t, env.URL, w.Name, "--json", "owner", "x")
	require.Equal(t, 0, r.code, "%+v", r)
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.out), &m))
	require.Equal(t, "owned-by", m["outcome"])
	r = cli(t, env.URL, w.Name, "send", "x", "--json", "--from", "shop", "body")
	require.Equal(t, 0, r.code, "%+v", r)
	require.NoError(t, json.Unmarshal([]byte(r.out), &m))
	require.Equal(t, "posted", m["outcome"])

	// --creds before the command is read as the flag: its file is opened.
	creds := filepath.Join(t.TempDir(), "missing.creds")
	r = cli(t, env.URL, w.Name, "--creds", creds, "send", "x", "hello")
	require.Equal(t, 1, r.code, "%+v", r)
	require.Contains(t, r.err, "missing.creds")
	require.NotContains(t, r.err, "unknown command")

	// A command's own flag before the command is not a global one.
	r = cli(t, env.URL, w.Name, "--node", "n1", "claim", "x")
	require.Equal(t, 2, r.code, "%+v", r)
	require.Contains(t, r.err, "flag provided but not defined: -node")
}

// TestCLI_FlagGrammarKept: what flag.FlagSet accepted still works: -name
// for --name, --name=value, a value that starts with '-', flags between
// the arguments.
func TestCLI_FlagGrammarKept(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{MinTTL: time.Second})
	r := cli(t, env.URL, w.Name, "send", "x", "-from", "-shop", "first")
	require.Equal(t, 0, r.code, "%+v", r)
	r = cli(t, env.URL, w.Name, "send", "--msg-id=k1", "x", "second")
	require.Equal(t, 0, r.code, "%+v", r)
	r = cli(t, env.URL, w.Name, "claim", "-node=n1", "x", "-ttl", "20s")
	require.Equal(t, 0, r.code, "%+v", r)
	r = cli(t, env.URL, w.Name, "drain", "x", "--node", "n1", "-epoch", "1")
	require.Equal(t, 0, r.code, "%+v", r)
	require.Contains(t, r.out, "from=-shop delivery=1 epoch=1 body=first\n")
	require.Contains(t, r.out, "body=second\n")
	require.Contains(t, r.out, "done count=2")
}

// allCommands are the commands `fencepost help` lists.
var allCommands = []string{"bench", "call", "claim", "completion", "dlq", "drain", "guard", "help", "ls", "owner",
	"release", "renew", "reset", "seize", "send", "stat", "state", "timer", "verify", "watch", "work", "world"}

// TestCLI_HelpCommand: `help COMMAND` and `COMMAND --help` (and -h) print
// the command's usage, its flags, the global flags and an example, on
// stdout, exit 0; every command has an example.
func TestCLI_HelpCommand(t *testing.T) {
	r := cli(t, nowhere, noWorld, "help", "claim")
	require.Equal(t, 0, r.code, "%+v", r)
	for _, want := range []string{"usage: fencepost claim ID --node N [--ttl 10s]", "\nflags:\n", "--node N", "--ttl D",
		"global flags (before or after the command):", "--server URL", "--world W", "\nexamples:\n", "fencepost claim order-42 --node node-a"} {
		require.Contains(t, r.out, want)
	}
	for _, args := range [][]string{{"claim", "--help"}, {"claim", "-h"}, {"--world", "w", "claim", "x", "--help"}} {
		h := cli(t, nowhere, noWorld, args...)
		require.Equal(t, 0, h.code, "%v: %+v", args, h)
		require.Equal(t, r.out, h.out, "%v", args)
	}

	listed := cli(t, nowhere, noWorld, "help")
	require.Equal(t, 0, listed.code, "%+v", listed)
	require.Equal(t, listed.out, cli(t, nowhere, noWorld, "--help").out)
	var names []string
	sc := bufio.NewScanner(strings.NewReader(listed.out))
	inCommands := false
	for sc.Scan() {
		switch line := sc.Text(); {
		case line == "commands:":
			inCommands = true
		case line == "":
			inCommands = false
		case inCommands:
			names = append(names, strings.Fields(line)[0])
		}
	}
	require.Equal(t, allCommands, names)
	for _, name := range names {
		h := cli(t, nowhere, noWorld, "help", name)
		require.Equal(t, 0, h.code, "%s: %+v", name, h)
		require.Contains(t, h.out, "usage: fencepost "+name, name)
		require.Contains(t, h.out, "\nexamples:\n  ", name)
	}

	r = cli(t, nowhere, noWorld, "help", "nope")
	require.Equal(t, 2, r.code, "%+v", r)
	require.Contains(t, r.err, `unknown command "nope"`)
}

// TestCLI_Version: --version prints the module version Go recorded in
// the binary, else devel and the commit if Go recorded one, before or
// after a command (`go version -m` reads the same record).
func TestCLI_Version(t *testing.T) {
	out, err := exec.Command("go", "version", "-m", bin).CombinedOutput()
	require.NoError(t, err, string(out))
	var mod, rev, modified string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 3 && f[0] == "mod" && f[1] == "github.com/fencepost/fencepost" && f[2] != "(devel)":
			mod = f[2]
		case len(f) == 2 && f[0] == "build" && strings.HasPrefix(f[1], "vcs.revision="):
			rev = strings.TrimPrefix(f[1], "vcs.revision=")[:12]
		case len(f) == 2 && f[0] == "build" && f[1] == "vcs.modified=true":
			modified = ", modified"
		}
	}
	want := "devel"
	switch {
	case mod != "":
		want = mod
	case rev != "":
		want = "devel (" + rev + modified + ")"
	}
	for _, args := range [][]string{{"--version"}, {"owner", "x", "--version"}} {
		r := cli(t, nowhere, noWorld, args...)
		require.Equal(t, 0, r.code, "%v: %+v", args, r)
		require.Equal(t, "fencepost "+want+"\n", r.out, "%v", args)
	}
}

// TestCLI_Completion: completion prints a script per shell; the scripts
// ask the binary (__complete) for the words; bash, run on the script,
// completes a command, a flag and a world operation.
func TestCLI_Completion(t *testing.T) {
	for _, sh := range []string{"bash", "zsh", "fish"} {
		r := cli(t, nowhere, noWorld, "completion", sh)
		require.Equal(t, 0, r.code, "%s: %+v", sh, r)
		require.Contains(t, r.out, "__complete --", sh)
		if path, err := exec.LookPath(sh); err == nil {
			check := exec.Command(path, "-n")
			check.Stdin = strings.NewReader(r.out)
			out, err := check.CombinedOutput()
			require.NoError(t, err, "%s -n: %s", sh, out)
		}
	}
	r := cli(t, nowhere, noWorld, "completion", "tcsh")
	require.Equal(t, 2, r.code, "%+v", r)
	require.Contains(t, r.err, "want bash, zsh or fish")

	for _, c := range []struct {
		words []string
		want  string
	}{
		{[]string{"cl"}, "claim\n"},
		{[]string{"wor"}, "work\nworld\n"},
		{[]string{"claim", "x", "--n"}, "--node\n"},
		{[]string{"--world", "w", "claim", "--ti"}, "--timeout\n"},
		{[]string{"world", ""}, "add\ninfo\nls\nrm\n"},
		{[]string{"dlq", "re"}, "repost\n"},
		{[]string{"help", "se"}, "seize\nsend\n"},
		{[]string{"completion", "f"}, "fish\n"},
		{[]string{"claim", "--node", ""}, ""},
		{[]string{"world", "add", "w", "--storage", ""}, "file\nmemory\n"},
		{[]string{"--log-level", "d"}, "debug\n"},
		{[]string{"world", "add", "w", "--purge", "s"}, "server\n"},
		{[]string{"claim", "x", ""}, ""},
	} {
		r := cli(t, nowhere, noWorld, append([]string{"__complete", "--"}, c.words...)...)
		require.Equal(t, 0, r.code, "%v: %+v", c.words, r)
		require.Equal(t, c.want, r.out, "%v", c.words)
	}

	t.Run("bash", completeInBash)
	t.Run("zsh", completeInZsh)
	t.Run("fish", completeInFish)
}

// shellOut runs script in shell with bin's directory first on PATH and
// FP=bin, and returns its stdout.
func shellOut(t *testing.T, shell string, args ...string) string {
	t.Helper()
	path, err := exec.LookPath(shell)
	if err != nil {
		t.Skipf("no %s", shell)
	}
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), "FP="+bin, "PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"))
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	require.NoError(t, cmd.Run(), se.String())
	return so.String()
}

// completeInBash runs the bash script's function as bash's completion
// does (COMP_WORDS, COMP_CWORD) and reads COMPREPLY.
func completeInBash(t *testing.T) {
	script := cli(t, nowhere, noWorld, "completion", "bash").out
	for _, c := range []struct {
		line string // the words before the cursor, and the word under it
		want string
	}{
		{`COMP_WORDS=("$FP" cla); COMP_CWORD=1`, "claim"},
		{`COMP_WORDS=("$FP" --world w seize x --fo); COMP_CWORD=5`, "--force"},
		{`COMP_WORDS=("$FP" world i); COMP_CWORD=2`, "info"},
	} {
		out := shellOut(t, "bash", "-c", script+"\n"+c.line+"\n_fencepost\nprintf '%s\\n' \"${COMPREPLY[@]}\"")
		require.Equal(t, c.want+"\n", out, c.line)
	}
}

// completeInZsh runs the zsh script's function with words and CURRENT
// set as zsh's completion sets them, compadd and _files standing in for
// the completion system's.
func completeInZsh(t *testing.T) {
	script := cli(t, nowhere, noWorld, "completion", "zsh").out
	stubs := "compdef() {}\ncompadd() { [[ $1 == -a ]] && print -l -- ${(P)2} }\n_files() { print FILES }\n"
	for _, c := range []struct{ line, want string }{
		{`words=($FP cla); CURRENT=2`, "claim\n"},
		{`words=($FP world add x --storage ""); CURRENT=6`, "file\nmemory\n"},
		{`words=($FP claim --node ""); CURRENT=4`, "FILES\n"},
	} {
		out := shellOut(t, "zsh", "-c", stubs+script+"\n"+c.line+"\n_fencepost")
		require.Equal(t, c.want, out, c.line)
	}
}

// completeInFish asks fish itself (complete -C) with the script loaded.
func completeInFish(t *testing.T) {
	script := cli(t, nowhere, noWorld, "completion", "fish").out
	for _, c := range []struct{ line, want string }{
		{"fencepost cla", "claim\n"},
		{"fencepost world add x --storage ", "file\nmemory\n"},
		{"fencepost --world w seize x --fo", "--force\n"},
	} {
		out := shellOut(t, "fish", "-c", script+"\ncomplete -C '"+c.line+"'")
		require.Equal(t, c.want, out, c.line)
	}
}

// TestCLI_UsageErrors_BeforeTheCommand: what goes wrong before the
// command is a usage error (exit 2) that says what, on stderr.
func TestCLI_UsageErrors_BeforeTheCommand(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--json"}, "want a command"},
		{[]string{"--world", "w"}, "want a command"},
		{[]string{"--nope", "owner", "x"}, "fencepost: flag provided but not defined: -nope"},
		{[]string{"--", "owner", "x"}, "want a COMMAND before --"},
		{[]string{"--world", "w", "bogus"}, `unknown command "bogus"`},
		{[]string{"--timeout", "soon", "owner", "x"}, "--timeout"},
	} {
		r := cli(t, nowhere, noWorld, c.args...)
		require.Equal(t, 2, r.code, "%v: %+v", c.args, r)
		require.Empty(t, r.out, "%v", c.args)
		require.Contains(t, r.err, c.want, "%v", c.args)
	}
}
