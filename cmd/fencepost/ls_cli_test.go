package main_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// lsJSON runs `ls --json` with args and returns the id objects and the
// final outcome object.
func lsJSON(t *testing.T, url, w string, args ...string) ([]map[string]any, map[string]any) {
	t.Helper()
	r := cli(t, url, w, append([]string{"ls", "--json"}, args...)...)
	require.Equal(t, 0, r.code, "%v: %+v", args, r)
	lines := strings.Split(strings.TrimSuffix(r.out, "\n"), "\n")
	var ids []map[string]any
	for i, l := range lines {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &m), l)
		if i == len(lines)-1 {
			require.Equal(t, "listed", m["outcome"], l)
			require.EqualValues(t, len(ids), m["count"], l)
			return ids, m
		}
		require.Equal(t, "id", m["outcome"], l)
		ids = append(ids, m)
	}
	panic("unreachable")
}

func idsOf(objs []map[string]any) []string {
	out := []string{}
	for _, o := range objs {
		out = append(out, o["id"].(string))
	}
	return out
}

// TestCLI_Ls: each filter and their intersection, text and --json, an odd
// id, paging with --limit and --after, and bad input (docs/design.md section 5, "Listing ids").
func TestCLI_Ls(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{MinTTL: time.Second, MaxDeliveries: 1})
	url, wn := env.URL, w.Name
	ctx := testutil.Ctx(t, time.Minute)

	r := cli(t, url, wn, "ls")
	require.Equal(t, 0, r.code, r.err)
	require.Equal(t, "listed count=0\n", r.out, "an empty world")

	odd := "日本.* x"
	for _, s := range [][]string{
		{"claim", "a", "--node", "n1"},
		{"send", "a", "1"},
		{"send", "a", "2"},
		{"claim", "b", "--node", "n2"},
		{"send", "c", "1"},
		{"claim", odd, "--node", "n1"},
		{"send", odd, "1"},
		{"claim", "e", "--node", "n1"},
		{"release", "e", "--node", "n1"},
		{"send", "d", "poison"},
		{"claim", "d", "--node", "n1"},
	} {
		r := cli(t, url, wn, s...)
		require.Equal(t, 0, r.code, "%v: %+v", s, r)
	}
	// d's message fails once: dead-lettered (max_deliveries 1).
	st, err := w.Ownership.Owner(ctx, "d")
	require.NoError(t, err)
	res, err := w.Drainer.Drain(ctx, "d", "n1", st.Epoch, func(context.Context, drain.Message) error { return errors.New("no") })
	require.NoError(t, err)
	require.Equal(t, 1, res.DeadLettered)

	// Text: one line per id, in order, then listed.
	r = cli(t, url, wn, "ls")
	require.Equal(t, 0, r.code, r.err)
	lines := strings.Split(strings.TrimSuffix(r.out, "\n"), "\n")
	require.Len(t, lines, 7, r.out)
	require.Regexp(t, `^id id=a state=held node=n1 epoch=1 expires=\S+ depth=2 dead=0$`, lines[0])
	require.Regexp(t, `^id id=b state=held node=n2 epoch=1 expires=\S+ depth=0 dead=0$`, lines[1])
	require.Equal(t, `id id=c state=free epoch=0 depth=1 dead=0`, lines[2])
	require.Regexp(t, `^id id=d state=held node=n1 epoch=1 expires=\S+ depth=0 dead=1$`, lines[3])
	require.Equal(t, `id id=e state=free epoch=1 depth=0 dead=0`, lines[4])
	require.Regexp(t, `^id id="日本\.\* x" state=held node=n1 epoch=1 expires=\S+ depth=1 dead=0$`, lines[5])
	require.Equal(t, "listed count=6", lines[6])

	// --json: the same, one object per line; the odd id exactly.
	objs, done := lsJSON(t, url, wn)
	require.Equal(t, []string{"a", "b", "c", "d", "e", odd}, idsOf(objs))
	require.Equal(t, false, done["more"])
	require.NotContains(t, done, "next")
	require.Equal(t, map[string]any{"outcome": "id", "id": "c", "state": "free", "epoch": 0.0, "depth": 1.0, "dead": 0.0}, objs[2])
	require.Equal(t, "held", objs[5]["state"])
	require.Equal(t, "n1", objs[5]["node"])
	require.NotEmpty(t, objs[5]["expires"])
	require.Equal(t, 1.0, objs[5]["depth"])
	// The odd id from the listing works as an id.
	r = cli(t, url, wn, "owner", objs[5]["id"].(string))
	require.Equal(t, 0, r.code, r.err)
	require.True(t, strings.HasPrefix(r.out, "owned-by node=n1 epoch=1 "), r.out)

	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--with-mail"}, []string{"a", "c", odd}},
		{[]string{"--dead"}, []string{"d"}},
		{[]string{"--held-by", "n1"}, []string{"a", "d", odd}},
		{[]string{"--held-by", "n2"}, []string{"b"}},
		{[]string{"--held-by", odd}, []string{}},
		{[]string{"--held-by", "n1", "--with-mail"}, []string{"a", odd}},
		{[]string{"--held-by", "n1", "--dead"}, []string{"d"}},
		{[]string{"--with-mail", "--dead"}, []string{}},
		{[]string{"--after", "c"}, []string{"d", "e", odd}},
		{[]string{"--after", "a", "--with-mail"}, []string{"c", odd}},
		{[]string{"--after", odd}, []string{}},
	} {
		objs, done := lsJSON(t, url, wn, c.args...)
		require.Equal(t, c.want, idsOf(objs), "%v", c.args)
		require.Equal(t, false, done["more"], "%v", c.args)
	}

	// Cut: the last line says where to go on.
	r = cli(t, url, wn, "ls", "--with-mail", "--limit", "2")
	require.Equal(t, 0, r.code, r.err)
	require.True(t, strings.HasSuffix(r.out, "\nlisted count=2 more next=c\n"), r.out)
}

// TestCLI_Ls_Paging: 25 ids, 10 a page: three pages, resumed with the
// next of the page before; together every id once, in order.
func TestCLI_Ls_Paging(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{})
	ctx := testutil.Ctx(t, time.Minute)
	var want []string
	for i := range 25 {
		id := fmt.Sprintf("日本 %02d.*", i)
		want = append(want, id)
		if i%2 == 0 {
			_, err := w.Ownership.Claim(ctx, id, "n1", time.Minute)
			require.NoError(t, err)
		} else {
			_, err := w.Queue.Send(ctx, id, []byte("m"))
			require.NoError(t, err)
		}
	}
	var got []string
	after := []string{}
	for page := 1; page <= 3; page++ {
		objs, done := lsJSON(t, env.URL, w.Name, append([]string{"--limit", "10"}, after...)...)
		got = append(got, idsOf(objs)...)
		if page < 3 {
			require.Len(t, objs, 10)
			require.Equal(t, true, done["more"])
			require.Equal(t, objs[9]["id"], done["next"])
			after = []string{"--after", done["next"].(string)}
			continue
		}
		require.Len(t, objs, 5)
		require.Equal(t, false, done["more"])
	}
	require.Equal(t, want, got, "every id once, in order")
}

// TestCLI_Ls_BadInput: usage errors (exit 2) that print nothing on stdout.
func TestCLI_Ls_BadInput(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{})
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"ls", "--limit", "0"}, "1 or more"},
		{[]string{"ls", "--limit", "-3"}, "1 or more"},
		{[]string{"ls", "--limit", "x"}, "1 or more"},
		{[]string{"ls", "--held-by", ""}, "the node is empty"},
		{[]string{"ls", "--held-by", "\xff"}, "not valid UTF-8"},
		{[]string{"ls", "--held-by", strings.Repeat("n", 257)}, "257 bytes"},
		{[]string{"ls", "--after", ""}, "the id is empty"},
		{[]string{"ls", "some-id"}, "takes no arguments"},
		{[]string{"ls", "--json", "--nope"}, "flag provided but not defined"},
	} {
		r := cli(t, env.URL, w.Name, c.args...)
		require.Equal(t, 2, r.code, "%q: %+v", c.args, r)
		require.Empty(t, r.out, "%q", c.args)
		require.Contains(t, r.err, c.want, "%q", c.args)
		require.Contains(t, r.err, "usage: fencepost ls", "%q", c.args)
	}
}
