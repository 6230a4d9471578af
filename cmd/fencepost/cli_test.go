package main_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

var bin string

// TestMain builds the real binary: the CLI's words and exit codes are a
// public contract, so the tests run it as scripts do.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fencepost-cli")
	if err != nil {
		panic(err)
	}
	bin = filepath.Join(dir, "fencepost")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		panic(string(out))
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type result struct {
	out, err string
	code     int
}

func cli(t *testing.T, url, w string, args ...string) result {
	t.Helper()
	return cliStdin(t, url, w, nil, args...)
}

// cliStdin runs the client with stdin (nil: none) and returns its output
// and exit code.
func cliStdin(t *testing.T, url, w string, stdin []byte, args ...string) result {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "NATS_URL="+url, "FENCEPOST_WORLD="+w)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return result{so.String(), se.String(), code}
}

func TestCLI_OwnershipWordsAndExitCodes(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{MinTTL: 1000000000})
	url, wn := env.URL, w.Name
	steps := []struct {
		args   []string
		code   int
		prefix string
	}{
		{[]string{"owner", "a.b c"}, 11, "free epoch=0"},
		{[]string{"claim", "a.b c", "--node", "n1"}, 0, "claimed epoch=1 "},
		{[]string{"claim", "a.b c", "--node", "n2"}, 10, "held-by node=n1 epoch=1 "},
		{[]string{"owner", "a.b c"}, 0, "owned-by node=n1 epoch=1 "},
		{[]string{"guard", "a.b c", "--node", "n1", "--epoch", "1"}, 0, "owner epoch=1"},
		{[]string{"renew", "a.b c", "--node", "n1", "--ttl", "20s"}, 0, "renewed expires="},
		{[]string{"renew", "a.b c", "--node", "n2"}, 10, "held-by node=n1"},
		{[]string{"seize", "a.b c", "--node", "n2"}, 15, "live node=n1 epoch=1"},
		{[]string{"seize", "a.b c", "--node", "n2", "--force"}, 0, "seized epoch=2"},
		{[]string{"guard", "a.b c", "--node", "n1", "--epoch", "1"}, 13, "fenced current=2"},
		{[]string{"release", "a.b c", "--node", "n1"}, 12, "not-owner node=n2 epoch=2"},
		{[]string{"release", "a.b c", "--node", "n2"}, 0, "released"},
		{[]string{"release", "a.b c", "--node", "n2"}, 11, "free epoch=2"},
		{[]string{"guard", "a.b c", "--node", "n2", "--epoch", "2"}, 11, "free epoch=2"},
		{[]string{"renew", "a.b c", "--node", "n2"}, 11, "free epoch=2"},
		{[]string{"seize", "a.b c", "--node", "n2"}, 11, "free epoch=2"},
		{[]string{"claim", "a.b c", "--node", "n3"}, 0, "claimed epoch=3 "},
		{[]string{"reset", "--yes"}, 0, "cleared"},
		{[]string{"owner", "a.b c"}, 11, "free epoch=0"},
	}
	for _, s := range steps {
		r := cli(t, url, wn, s.args...)
		require.Equal(t, s.code, r.code, "%v: stdout %q stderr %q", s.args, r.out, r.err)
		require.True(t, strings.HasPrefix(r.out, s.prefix), "%v: got %q, want prefix %q", s.args, r.out, s.prefix)
	}
}

func TestCLI_JSON(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{})
	r := cli(t, env.URL, w.Name, "claim", "x", "--node", "n1", "--json")
	require.Equal(t, 0, r.code, r.err)
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.out), &m))
	require.Equal(t, "claimed", m["outcome"])
	require.EqualValues(t, 1, m["epoch"])
	require.NotEmpty(t, m["expires"])
	require.True(t, strings.HasPrefix(r.out, `{"outcome":`), "outcome comes first: %s", r.out)

	r = cli(t, env.URL, w.Name, "claim", "x", "--node", "n2", "--json")
	require.Equal(t, 10, r.code)
	require.NoError(t, json.Unmarshal([]byte(r.out), &m))
	require.Equal(t, "held-by", m["outcome"])
	require.Equal(t, "n1", m["node"])

	r = cli(t, env.URL, w.Name, "guard", "x", "--node", "n1", "--epoch", "9", "--json")
	require.Equal(t, 13, r.code)
	require.NoError(t, json.Unmarshal([]byte(r.out), &m))
	require.Equal(t, "fenced", m["outcome"])
	require.EqualValues(t, 1, m["current"])
}

func TestCLI_UsageAndErrors(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{MinTTL: 1000000000})
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{}, 2, ""},
		{[]string{"bogus"}, 2, "unknown command"},
		{[]string{"claim", "x"}, 2, "--node is required"},
		{[]string{"claim", "--node", "n"}, 2, "exactly one ID"},
		{[]string{"claim", "x", "--node", "n", "--nope"}, 2, "flag provided but not defined"},
		{[]string{"guard", "x", "--node", "n"}, 2, "--epoch is required"},
		{[]string{"reset"}, 2, "add --yes"},
		{[]string{"claim", "", "--node", "n"}, 1, "the id is empty"},
		{[]string{"claim", strings.Repeat("x", 257), "--node", "n"}, 1, "257 bytes"},
		{[]string{"claim", "x", "--node", "n", "--ttl", "5ms"}, 1, "outside this world's bounds"},
		{[]string{"owner", "x", "--world", "no-such"}, 1, "fencepost world add no-such"},
		{[]string{"owner", "x", "--world", "bad.name"}, 1, "invalid world name"},
	} {
		r := cli(t, env.URL, w.Name, tc.args...)
		require.Equal(t, tc.code, r.code, "%v: %q %q", tc.args, r.out, r.err)
		require.Contains(t, r.err, tc.msg, "%v", tc.args)
	}
	r := cli(t, "nats://127.0.0.1:1", w.Name, "owner", "x")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.err, "connect")
}
