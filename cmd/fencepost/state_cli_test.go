package main_test

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// stateWork runs fencepost work --state with cmd as its --exec.
func stateWork(t *testing.T, url, w, node, cmd string) *workProc {
	t.Helper()
	p := &workProc{cmd: exec.Command(bin, "work", "--node", node, "--ttl", "1s", "--all", "--state", "--exec", cmd), stderr: newSyncBuffer(), done: make(chan struct{})}
	p.cmd.Env = append(p.cmd.Environ(), "NATS_URL="+url, "FENCEPOST_WORLD="+w)
	p.cmd.Stderr = p.stderr
	p.start(t)
	return p
}

// stateOf is `fencepost state ID --json`: the values and the cursor.
func stateOf(t *testing.T, url, w, id string) (map[string]string, uint64) {
	t.Helper()
	r := cli(t, url, w, "state", id, "--json")
	require.Equal(t, 0, r.code, r.err)
	vals := map[string]string{}
	var cursor uint64
	for _, l := range strings.Split(strings.TrimSpace(r.out), "\n") {
		var o struct {
			Outcome, Key, Value, ID string
			Cursor                  uint64
			Keys                    int
		}
		require.NoError(t, json.Unmarshal([]byte(l), &o), l)
		switch o.Outcome {
		case "key":
			vals[o.Key] = o.Value
		case "state":
			require.Equal(t, id, o.ID)
			require.Equal(t, len(vals), o.Keys)
			cursor = o.Cursor
		default:
			t.Fatalf("outcome %q", l)
		}
	}
	return vals, cursor
}

// TestCLI_WorkState_Counter: examples/state/counter.sh (plain sh) under
// work --state counts each id's messages in its state; `state` shows it,
// `state --delete` is refused while the worker holds the id and deletes
// it once the worker stopped.
func TestCLI_WorkState_Counter(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{})
	script, err := filepath.Abs("../../examples/state/counter.sh")
	require.NoError(t, err)
	p := stateWork(t, env.URL, w.Name, "w1", "sh "+script)
	for _, b := range []string{"one", "two", "three"} {
		r := cli(t, env.URL, w.Name, "send", "acct-1", b)
		require.Equal(t, 0, r.code, r.err)
	}
	r := cli(t, env.URL, w.Name, "send", "acct-2", "solo")
	require.Equal(t, 0, r.code, r.err)
	testutil.WaitFor(t, 20*time.Second, "the counts", func() bool {
		a, _ := stateOf(t, env.URL, w.Name, "acct-1")
		b, _ := stateOf(t, env.URL, w.Name, "acct-2")
		return a["count"] == "3" && b["count"] == "1"
	})
	vals, cursor := stateOf(t, env.URL, w.Name, "acct-1")
	require.Equal(t, map[string]string{"count": "3", "last": "three"}, vals)
	require.NotZero(t, cursor)
	r = cli(t, env.URL, w.Name, "state", "acct-1")
	require.Equal(t, 0, r.code, r.err)
	require.Equal(t, "key key=count value=3\nkey key=last value=three\nstate id=acct-1 cursor="+itoa(cursor)+" keys=2\n", r.out)

	r = cli(t, env.URL, w.Name, "state", "acct-1", "--delete")
	require.Equal(t, 10, r.code, "held by the worker: %s %s", r.out, r.err)
	require.Contains(t, r.out, "held-by node=w1")

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, p.wait(t, 10*time.Second), p.stderr.String())
	r = cli(t, env.URL, w.Name, "state", "acct-1", "--delete")
	require.Equal(t, 0, r.code, r.err)
	require.Equal(t, "deleted id=acct-1 keys=2\n", r.out)
	vals, after := stateOf(t, env.URL, w.Name, "acct-1")
	require.Empty(t, vals)
	require.Equal(t, cursor, after, "the cursor kept")

	r = cli(t, env.URL, w.Name, "state")
	require.Equal(t, 2, r.code)
	r = cli(t, env.URL, w.Name, "state", "")
	require.Equal(t, 2, r.code, r.out)
}

// TestCLI_WorkState_BadWrites: a command whose writes are not one JSON
// object, or name a bad key, fails the message and stages nothing; the
// message goes to the dead letters after max_deliveries.
func TestCLI_WorkState_BadWrites(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{MaxDeliveries: 2})
	cmd := `case "$(cat)" in
	  json) printf 'not json' > "$FENCEPOST_STATE_WRITES" ;;
	  key) printf '{"a.b":"1","ok":"1"}' > "$FENCEPOST_STATE_WRITES" ;;
	  good) printf '{"ok":"yes"}' > "$FENCEPOST_STATE_WRITES" ;;
	esac`
	p := stateWork(t, env.URL, w.Name, "w1", cmd)
	for _, b := range []string{"json", "key", "good"} {
		r := cli(t, env.URL, w.Name, "send", "x", b)
		require.Equal(t, 0, r.code, r.err)
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if vals, _ := stateOf(t, env.URL, w.Name, "x"); vals["ok"] == "yes" {
			break
		}
		if time.Now().After(deadline) {
			st := cli(t, env.URL, w.Name, "stat", "x")
			dl := cli(t, env.URL, w.Name, "dlq", "ls", "x")
			t.Fatalf("the good write not stored after 60 s\nstat: %s\ndlq: %s\nworker stderr:\n%s", st.out, dl.out, p.stderr.String())
		}
	}
	vals, _ := stateOf(t, env.URL, w.Name, "x")
	require.Equal(t, map[string]string{"ok": "yes"}, vals)
	testutil.WaitFor(t, 20*time.Second, "two dead letters", func() bool {
		r := cli(t, env.URL, w.Name, "dlq", "ls", "x")
		return r.code == 0 && strings.Contains(r.out, "listed count=2")
	})
	r := cli(t, env.URL, w.Name, "dlq", "ls", "x")
	require.Contains(t, r.out, "not one JSON object")
	require.Contains(t, r.out, `has '.' at byte 1`)
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }

// TestCLI_WorkState_PythonBalance: examples/state/balance.py keeps a
// balance per account; an overdraft is refused (exit 1: nothing staged)
// and dead-lettered, and the balance stays exact.
func TestCLI_WorkState_PythonBalance(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{MaxDeliveries: 2})
	script, err := filepath.Abs("../../examples/state/balance.py")
	require.NoError(t, err)
	stateWork(t, env.URL, w.Name, "w1", py+" "+script)
	for _, b := range []string{"100", "-30", "-500", "5"} {
		r := cli(t, env.URL, w.Name, "send", "acct-1", "--", b)
		require.Equal(t, 0, r.code, r.err)
	}
	testutil.WaitFor(t, 30*time.Second, "the balance", func() bool {
		vals, _ := stateOf(t, env.URL, w.Name, "acct-1")
		return vals["n"] == "3"
	})
	vals, _ := stateOf(t, env.URL, w.Name, "acct-1")
	require.Equal(t, map[string]string{"balance": "75", "n": "3"}, vals)
}

// TestCLI_Work_StateOnOldWorld: `work --state` on a world whose bucket does
// not take atomic batches (one created before per-id state) is refused,
// and the CLI's hint names the command that turns them on; running it
// lets the same work start. The library's error carries no CLI advice.
func TestCLI_Work_StateOnOldWorld(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	cw := env.World(t, world.Config{})
	ctx := testutil.Ctx(t, 10*time.Second)
	js := env.Client.JetStream()
	cfg := handles.Of(cw).Bucket.CachedInfo().Config
	cfg.AllowAtomicPublish = false
	_, err := js.UpdateStream(ctx, cfg)
	require.NoError(t, err)

	r := cli(t, env.URL, cw.Name, "work", "--node", "n1", "--all", "--state", "--exec", "cat")
	require.Equal(t, 1, r.code, "%q %q", r.out, r.err)
	require.Contains(t, r.err, "does not allow atomic batches")
	require.Contains(t, r.err, "run `fencepost world add "+cw.Name+"` again")
	require.NotContains(t, world.ErrNoState.Error(), "fencepost world add")

	r = cli(t, env.URL, cw.Name, "world", "add", cw.Name)
	require.Equal(t, 0, r.code, "%q %q", r.out, r.err)
	w, err := world.Open(ctx, js, cw.Name)
	require.NoError(t, err)
	require.True(t, w.AllowsState())
}
