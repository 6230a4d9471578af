package main_test

import (
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// TestCLI_Timers: send --after/--at sets a timer (scheduled key=K at=T
// timer_seq=N), ls --scheduled and timer ls list the pending ones, stat
// counts them, timer cancel removes one (cancelled count=1, then 0) and
// it never fires, the other fires into the mailbox at its time; bad
// input is a usage error (exit 2) that stores nothing.
func TestCLI_Timers(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{})
	run := func(args ...string) result { return cli(t, env.URL, w.Name, args...) }

	r := run("send", "order.42", "--after", "1500ms", "--key", "soon", "--from", "shop", "pay")
	require.Equal(t, 0, r.code, "%+v", r)
	require.Regexp(t, `^scheduled key=soon at=\S+ timer_seq=\d+\n$`, r.out)
	r = run("send", "order.42", "--at", time.Now().Add(time.Hour).UTC().Format(time.RFC3339), "later", "--json")
	require.Equal(t, 0, r.code, "%+v", r)
	m := jsonOf(t, r)
	require.Equal(t, "scheduled", m["outcome"])
	laterKey := m["key"].(string)
	require.Regexp(t, `^_`, laterKey)

	r = run("ls", "--scheduled")
	require.Equal(t, 0, r.code, "%+v", r)
	require.Regexp(t, `(?m)^timer id=order.42 key=_\S+ at=\S+ due_in=\S+ size=5 timer_seq=\d+\ntimer id=order.42 key=soon at=\S+ due_in=\S+ from=shop size=3 timer_seq=\d+\nlisted count=2\n$`, r.out)
	r = run("timer", "ls", "nobody")
	require.Equal(t, "listed count=0\n", r.out)
	r = run("stat")
	require.Equal(t, 0, r.code, "%+v", r)
	require.Contains(t, r.out, " timers=2 timers_waiting=0")
	r = run("stat", "order.42")
	require.Regexp(t, ` timers=2 next_timer=\S+`, r.out)

	r = run("timer", "cancel", "order.42", laterKey)
	require.Equal(t, "cancelled count=1\n", r.out, "%+v", r)
	r = run("timer", "cancel", "order.42", laterKey)
	require.Equal(t, "cancelled count=0\n", r.out, "%+v", r)

	testutil.WaitFor(t, 20*time.Second, "the timer fired", func() bool {
		return regexp.MustCompile(`^stat depth=1 `).MatchString(run("stat", "order.42").out)
	})
	r = run("claim", "order.42", "--node", "n1")
	require.Equal(t, 0, r.code, "%+v", r)
	r = run("drain", "order.42", "--node", "n1", "--epoch", "1")
	require.Contains(t, r.out, "from=shop delivery=1 epoch=1 body=pay\n")
	require.Contains(t, r.out, "done count=1")
	r = run("ls", "--scheduled")
	require.Equal(t, "listed count=0\n", r.out)
	r = run("timer", "sweep")
	require.Equal(t, "swept count=1\n", r.out, "%+v", r)

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"send", "x", "--after", "0s", "b"}, "positive duration"},
		{[]string{"send", "x", "--after", "-1s", "b"}, "positive duration"},
		{[]string{"send", "x", "--at", "tomorrow", "b"}, "RFC 3339"},
		{[]string{"send", "x", "--at", time.Now().Add(-time.Minute).Format(time.RFC3339), "b"}, "in the past"},
		{[]string{"send", "x", "--at", time.Now().Add(400 * 24 * time.Hour).Format(time.RFC3339), "b"}, "ahead"},
		{[]string{"send", "x", "--at", time.Now().Add(time.Hour).Format(time.RFC3339), "--after", "1h", "b"}, "not both"},
		{[]string{"send", "x", "--key", "k", "b"}, "give --at or --after"},
		{[]string{"send", "x", "--after", "1h", "--key", "a.b", "b"}, "timer key"},
		{[]string{"send", "x", "--after", "1h", "--key", "_mine", "b"}, "starts with '_'"},
		{[]string{"ls", "--scheduled", "--with-mail"}, "--scheduled lists timers"},
		{[]string{"timer", "cancel", "x", "a b"}, "timer key"},
		{[]string{"timer", "cancel", "x"}, "want ls"},
		{[]string{"timer"}, "want ls"},
	} {
		r := run(c.args...)
		require.Equal(t, 2, r.code, "%v: %+v", c.args, r)
		require.Contains(t, r.err, c.want, "%v", c.args)
	}
	r = run("stat", "x")
	require.Regexp(t, `^stat depth=0 .* timers=0$`, r.out[:len(r.out)-1], "nothing was stored")
}
