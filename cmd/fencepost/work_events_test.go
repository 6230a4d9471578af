package main_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// eventProc is a `fencepost work` process whose stdout is kept too.
type eventProc struct {
	*workProc
	stdout *syncBuffer
}

func startWorkArgs(t *testing.T, url, w string, args ...string) *eventProc {
	t.Helper()
	p := &eventProc{
		workProc: &workProc{cmd: exec.Command(bin, append([]string{"work"}, args...)...), stderr: newSyncBuffer(), done: make(chan struct{})},
		stdout:   newSyncBuffer(),
	}
	p.cmd.Env = append(os.Environ(), "NATS_URL="+url, "FENCEPOST_WORLD="+w, "FENCEPOST_LOG=")
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	p.start(t)
	return p
}

// events parses every complete line of stdout as one JSON object.
func (p *eventProc) events(t *testing.T) []map[string]any {
	t.Helper()
	s := p.stdout.String()
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	} else {
		return nil
	}
	var out []map[string]any
	for _, l := range strings.Split(s, "\n") {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &m), "a line of work --json that is not one JSON object: %q\nstderr:\n%s", l, p.stderr.String())
		require.NotEmpty(t, m["event"], l)
		at, ok := m["at"].(string)
		require.True(t, ok, "no at: %s", l)
		_, err := time.Parse(time.RFC3339Nano, at)
		require.NoError(t, err, l)
		require.True(t, strings.HasPrefix(l, `{"event":`), "event comes first: %s", l)
		out = append(out, m)
	}
	return out
}

// waitEvent polls stdout until an event matches, and returns it.
func (p *eventProc) waitEvent(t *testing.T, d time.Duration, what string, match func(map[string]any) bool) map[string]any {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		for _, ev := range p.events(t) {
			if match(ev) {
				return ev
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v, no %s event; stdout:\n%s\nstderr:\n%s", d, what, p.stdout.String(), p.stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func is(event string, kv ...any) func(map[string]any) bool {
	return func(m map[string]any) bool {
		if m["event"] != event {
			return false
		}
		for i := 0; i+1 < len(kv); i += 2 {
			if m[kv[i].(string)] != kv[i+1] {
				return false
			}
		}
		return true
	}
}

// waitStderr polls stderr until it holds every one of subs.
func waitStderr(t *testing.T, p *workProc, d time.Duration, subs ...string) string {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		s := p.stderr.String()
		missing := ""
		for _, sub := range subs {
			if !strings.Contains(s, sub) {
				missing = sub
				break
			}
		}
		if missing == "" {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v, stderr has no %q:\n%s", d, missing, s)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// failOnce is a handler that fails its first delivery of each message
// with exit status 7 and acknowledges the second, appending
// "seq delivery" to out.
func failOnce(dir, out string) string {
	return `cat >/dev/null; echo handler-says-hi; if [ ! -e ` + dir + `/tried.$FENCEPOST_SEQ ]; then touch ` + dir + `/tried.$FENCEPOST_SEQ; echo failing >&2; exit 7; fi; echo "$FENCEPOST_SEQ $FENCEPOST_DELIVERY" >> ` + out
}

// TestCLI_Work_EventsText: without --json, `work` logs at info on stderr
// with no --log-level: the startup line, the node lease, the claim, a
// failed delivery (exit status, next retry), and the stop; the retry
// delivers the message again (delivery 2).
func TestCLI_Work_EventsText(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{})
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	p := startWorkArgs(t, env.URL, w.Name, "--node", "w1", "--ttl", "2s", "--ids", "x", "--exec", failOnce(dir, out))
	waitStderr(t, p.workProc, 10*time.Second, `msg="worker starting" node=w1 event=started world=`+w.Name+` ids=[x] ttl=2s exec=`, "msg=\"node lease acquired\" node=w1 event=lease_acquired epoch=")
	r := cli(t, env.URL, w.Name, "send", "x", "m1")
	require.Equal(t, 0, r.code, r.err)
	lines := waitLines(t, out, 1, 10*time.Second)
	require.Regexp(t, `^\d+ 2$`, lines[0], "delivered again after the failure")
	s := waitStderr(t, p.workProc, 5*time.Second,
		"msg=claimed node=w1 event=claimed id=x epoch=",
		"level=WARN msg=\"handler failed; delivered again later\" node=w1 event=failed id=x seq=",
		"delivery=1 max_deliveries=5 error=\"exit status 7\" exit=7 retry_in=100ms")
	require.NotContains(t, s, "event=delivered", "per-delivery lines only at debug")
	require.Contains(t, p.stdout.String(), "handler-says-hi", "without --json the command's stdout is the worker's")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, p.wait(t, 10*time.Second))
	waitStderr(t, p.workProc, time.Second, "node=w1 event=lease_released", `msg=stopped node=w1 event=stopped reason=signal cause="terminated signal received" exit=0`)
}

// TestCLI_Work_EventsJSON: with --json, stdout is one JSON object per
// event, each with its documented fields (the command's own stdout goes
// to stderr): started, lease_acquired, claimed, failed with its retry,
// delivered (--log-level debug), lost after a forced seize, stopped and
// lease_released.
func TestCLI_Work_EventsJSON(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{})
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	p := startWorkArgs(t, env.URL, w.Name, "--node", "w1", "--ttl", "2s", "--ids", "x,y", "--exec", failOnce(dir, out), "--json", "--log-level", "debug")

	ev := p.waitEvent(t, 10*time.Second, "started", is("started"))
	require.Equal(t, "w1", ev["node"])
	require.Equal(t, w.Name, ev["world"])
	require.Equal(t, []any{"x", "y"}, ev["ids"])
	require.Equal(t, "2s", ev["ttl"])
	require.Equal(t, failOnce(dir, out), ev["exec"])
	require.EqualValues(t, 5, ev["max_deliveries"])
	ev = p.waitEvent(t, 10*time.Second, "lease_acquired", is("lease_acquired"))
	require.Equal(t, "w1", ev["node"])
	require.Greater(t, ev["epoch"], 0.0)

	r := cli(t, env.URL, w.Name, "send", "x", "m1", "--json")
	require.Equal(t, 0, r.code, r.err)
	var posted struct{ Seq float64 }
	require.NoError(t, json.Unmarshal([]byte(r.out), &posted))

	claimed := p.waitEvent(t, 10*time.Second, "claimed", is("claimed", "id", "x"))
	require.Equal(t, "w1", claimed["node"])
	require.Greater(t, claimed["epoch"], 0.0)
	ev = p.waitEvent(t, 10*time.Second, "failed", is("failed", "id", "x"))
	require.Equal(t, posted.Seq, ev["seq"])
	require.Equal(t, claimed["epoch"], ev["epoch"])
	require.EqualValues(t, 1, ev["delivery"])
	require.Equal(t, "exit status 7", ev["error"])
	require.EqualValues(t, 7, ev["exit"])
	require.Equal(t, "100ms", ev["retry_in"])
	require.Nil(t, ev["dead_letter"])
	ev = p.waitEvent(t, 10*time.Second, "delivered", is("delivered", "id", "x"))
	require.Equal(t, posted.Seq, ev["seq"])
	require.EqualValues(t, 2, ev["delivery"], "the retry")
	require.NotEmpty(t, ev["took"])
	require.Contains(t, p.stderr.String(), "handler-says-hi", "with --json the command's stdout goes to stderr")

	r = cli(t, env.URL, w.Name, "seize", "x", "--node", "ops", "--force")
	require.Equal(t, 0, r.code, r.out+r.err)
	ev = p.waitEvent(t, 10*time.Second, "lost", is("lost", "id", "x"))
	require.Equal(t, claimed["epoch"], ev["epoch"])
	require.Contains(t, ev["reason"], "taken over")

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT))
	require.Equal(t, 0, p.wait(t, 10*time.Second), p.stderr.String())
	ev = p.waitEvent(t, time.Second, "stopped", is("stopped"))
	require.Equal(t, "signal", ev["reason"])
	require.EqualValues(t, 0, ev["exit"])
	p.waitEvent(t, time.Second, "lease_released", is("lease_released", "node", "w1"))
	for _, ev := range p.events(t) {
		require.Equal(t, "w1", ev["node"], "every event names the node: %v", ev)
	}
}

// TestCLI_Work_DeadLettered: a handler that always fails: each delivery is
// a failed event, the last says dead_letter, and then the message is
// dead_lettered with its last error; text and JSON.
func TestCLI_Work_DeadLettered(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{MaxDeliveries: 2})
	const script = `cat >/dev/null; echo "no good" >&2; exit 9`

	t.Run("json", func(t *testing.T) {
		p := startWorkArgs(t, env.URL, w.Name, "--node", "w1", "--ids", "bad", "--exec", script, "--json")
		p.waitEvent(t, 10*time.Second, "started", is("started"))
		r := cli(t, env.URL, w.Name, "send", "bad", "poison", "--json")
		require.Equal(t, 0, r.code, r.err)
		var posted struct{ Seq float64 }
		require.NoError(t, json.Unmarshal([]byte(r.out), &posted))

		dead := p.waitEvent(t, 10*time.Second, "dead_lettered", is("dead_lettered", "id", "bad"))
		require.Equal(t, posted.Seq, dead["seq"])
		require.EqualValues(t, 2, dead["delivery"])
		require.Equal(t, "exit status 9", dead["error"])
		require.EqualValues(t, 9, dead["exit"])
		require.Greater(t, dead["epoch"], 0.0)
		require.Equal(t, "w1", dead["node"])

		var failed []map[string]any
		for _, ev := range p.events(t) {
			if is("failed", "id", "bad")(ev) {
				failed = append(failed, ev)
			}
			require.NotEqual(t, "delivered", ev["event"], "delivered only at debug")
		}
		require.Len(t, failed, 2)
		require.EqualValues(t, 1, failed[0]["delivery"])
		require.Equal(t, "100ms", failed[0]["retry_in"])
		require.EqualValues(t, 2, failed[1]["delivery"])
		require.Equal(t, true, failed[1]["dead_letter"])
		require.Nil(t, failed[1]["retry_in"])

		r = cli(t, env.URL, w.Name, "dlq", "ls", "bad")
		require.Equal(t, 0, r.code, r.err)
		require.Contains(t, r.out, "poison")
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
		require.Equal(t, 0, p.wait(t, 10*time.Second), p.stderr.String())
	})

	t.Run("text", func(t *testing.T) {
		p := startWorkArgs(t, env.URL, w.Name, "--node", "w2", "--ids", "worse", "--exec", script)
		waitStderr(t, p.workProc, 10*time.Second, "event=started")
		r := cli(t, env.URL, w.Name, "send", "worse", "poison")
		require.Equal(t, 0, r.code, r.err)
		waitStderr(t, p.workProc, 10*time.Second,
			"node=w2 event=failed id=worse seq=",
			`delivery=2 max_deliveries=2 error="exit status 9" exit=9 dead_letter=true`,
			`level=WARN msg="dead-lettered: no deliveries left (fencepost dlq ls|repost)" node=w2 event=dead_lettered id=worse seq=`)
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
		require.Equal(t, 0, p.wait(t, 10*time.Second), p.stderr.String())
	})
}

// TestCLI_Work_LogLevelWarn: --log-level warn keeps the info lines off
// stderr; --json prints the events on stdout all the same.
func TestCLI_Work_LogLevelWarn(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{})
	p := startWorkArgs(t, env.URL, w.Name, "--node", "w1", "--ids", "x", "--exec", "cat", "--json", "--log-level", "warn")
	p.waitEvent(t, 10*time.Second, "lease_acquired", is("lease_acquired"))
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, p.wait(t, 10*time.Second))
	p.waitEvent(t, time.Second, "stopped", is("stopped"))
	require.NotContains(t, p.stderr.String(), "level=INFO")
}
