package main_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/testkit/testutil"
)

// tourLine is one command of the README's tour and what its comment says
// it prints.
type tourLine struct {
	cmd    string // the shell command
	prefix string // the start of its first line of output
	code   int    // its exit code
}

// readmeTour reads the tour's block from the README: the shell function
// it defines, its commands, and the commented-out ones.
func readmeTour(t *testing.T) (prelude string, lines []tourLine, commented []string) {
	t.Helper()
	block := readmeBlock(t)
	exitRe := regexp.MustCompile(`\(exit (\d+)\)`)
	for _, l := range strings.Split(strings.TrimSpace(block), "\n") {
		switch {
		case strings.HasPrefix(l, "#"):
			commented = append(commented, l)
			continue
		case strings.HasPrefix(l, "go build "):
			require.Equal(t, "go build -o bin/ ./cmd/...", l)
			continue
		case regexp.MustCompile(`^\w+\(\) \{`).MatchString(l):
			prelude += l + "\n"
			continue
		}
		cmd, comment, ok := strings.Cut(l, " # ")
		require.True(t, ok, "a tour line without a comment saying what it prints: %q", l)
		tl := tourLine{cmd: strings.TrimSpace(cmd), prefix: strings.TrimSpace(comment)}
		for _, cut := range []string{"...", "  ", " ("} {
			tl.prefix, _, _ = strings.Cut(tl.prefix, cut)
		}
		tl.prefix = strings.TrimSpace(tl.prefix)
		if m := exitRe.FindStringSubmatch(comment); m != nil {
			tl.code, _ = strconv.Atoi(m[1])
		}
		lines = append(lines, tl)
	}
	return prelude, lines, commented
}

// readmeBlock is the tour's shell block, as it stands in the README.
func readmeBlock(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	_, after, ok := strings.Cut(string(b), "## A short tour of the CLI")
	require.True(t, ok, "the README has no tour")
	_, block, ok := strings.Cut(after, "```sh\n")
	require.True(t, ok)
	block, _, ok = strings.Cut(block, "```")
	require.True(t, ok)
	return block
}

// varying are the values of a tour's output that differ from one run to
// the next: times, and nothing else.
var varying = regexp.MustCompile(`(expires|oldest|oldest_age)=\S+|"(expires|oldest|oldest_age)":"[^"]*"`)

// TestCLI_ReadmeTour runs the README's tour line by line in sh, twice
// against one server, then a third time pasted whole: each line prints
// what its comment says and exits with the code it gives, and every run
// prints the same as the first but for times (expires, oldest). The lines that run
// until stopped (watch, work) are commented out; an uncommented one would
// hang here and fail at the deadline.
func TestCLI_ReadmeTour(t *testing.T) {
	prelude, lines, commented := readmeTour(t)
	require.NotEmpty(t, prelude, "the tour defines its shell function")
	require.GreaterOrEqual(t, len(lines), 10)
	for _, l := range lines {
		require.NotRegexp(t, `\b(watch|work)\b`, l.cmd, "a command that runs until stopped is not commented out")
	}
	for _, want := range []string{"watch", "work"} {
		found := false
		for _, c := range commented {
			found = found || (strings.Contains(c, " "+want+" ") && strings.Contains(c, "RUNS UNTIL Ctrl-C"))
		}
		require.True(t, found, "the tour shows %s, commented out and marked", want)
	}

	env := testutil.Start(t, testutil.Targets()[0])
	dir := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(dir, "bin"), 0o755))
	require.NoError(t, os.Symlink(bin, filepath.Join(dir, "bin", "fencepost")))
	runTour := func() []string {
		var outs []string
		for _, l := range lines {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			cmd := exec.CommandContext(ctx, "sh", "-c", prelude+l.cmd)
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "NATS_URL="+env.URL, "FENCEPOST_WORLD=not-the-tour")
			var so, se bytes.Buffer
			cmd.Stdout, cmd.Stderr = &so, &se
			err := cmd.Run()
			cancel()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else {
				require.NoError(t, err, l.cmd)
			}
			out := so.String()
			require.Equal(t, l.code, code, "%s: stdout %q stderr %q", l.cmd, out, se.String())
			require.True(t, startsWith(out, l.prefix), "%s: got %q, the README says %q", l.cmd, out, l.prefix)
			outs = append(outs, varying.ReplaceAllString(out, "$1$2=T"))
		}
		return outs
	}
	first := runTour()
	second := runTour()
	require.Equal(t, first, second, "a second tour prints what the first did, times aside")

	// Pasted whole into a shell (its standard input), the go build line
	// aside: it runs to its end and prints the same again.
	pasted := strings.Replace(readmeBlock(t), "go build -o bin/ ./cmd/...\n", "", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh")
	cmd.Dir, cmd.Stdin = dir, strings.NewReader(pasted)
	cmd.Env = append(os.Environ(), "NATS_URL="+env.URL)
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	require.NoError(t, cmd.Run(), "the block's last line exits 0; stderr %q", se.String())
	require.Equal(t, strings.Join(first, ""), varying.ReplaceAllString(so.String(), "$1$2=T"))
}

// startsWith: out starts with prefix, and prefix ends where a value ends
// ("posted seq=1" is not the start of "posted seq=12") or at an "=".
func startsWith(out, prefix string) bool {
	rest, ok := strings.CutPrefix(out, prefix)
	return ok && (strings.HasSuffix(prefix, "=") || rest == "" || rest[0] == ' ' || rest[0] == '\n')
}
