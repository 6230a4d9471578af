package main_test

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// TestCLI_Limits: each limit `world add` shows is what a post meets
// (docs/design.md section 5, "Limits say what they enforce"): a body of exactly max_body is posted and one byte
// more is refused naming max_body; --max-msg-size (the old name of
// --max-body) 10 takes 10 bytes; --max-bytes limits the world's bytes and
// `full` says which limit it hit (kind=messages or kind=bytes).
func TestCLI_Limits(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	url := env.URL
	run := func(w string, args ...string) result { t.Helper(); return cli(t, url, w, args...) }

	// The defaults: 1 MiB in all, as nats-server's max_payload.
	r := run("default", "world", "add", "dflt")
	require.Equal(t, 0, r.code, r.err)
	maxBody := int(world.Defaults.MaxBody)
	require.Contains(t, r.out, " max_body="+strconv.Itoa(maxBody)+" max_headers=8192 max_msgs=100000 max_bytes=-1 ")
	r = cliStdin(t, url, "dflt", bytes.Repeat([]byte("b"), maxBody), "send", "big", "--from", "me", "--msg-id", "k", "-")
	require.Equal(t, 0, r.code, r.err)
	require.True(t, strings.HasPrefix(r.out, "posted seq=1"), r.out)
	r = cliStdin(t, url, "dflt", bytes.Repeat([]byte("b"), maxBody+1), "send", "big", "-")
	require.Equal(t, 1, r.code, r.out)
	require.Contains(t, r.err, "the body is "+strconv.Itoa(maxBody+1)+" bytes, this world's max_body is "+strconv.Itoa(maxBody))

	// --max-msg-size 10 means a body of 10.
	r = run("default", "world", "add", "ten", "--max-msg-size", "10")
	require.Equal(t, 0, r.code, r.err)
	require.Contains(t, r.out, " max_body=10 ")
	r = run("ten", "send", "a", "--from", "someone", "0123456789")
	require.Equal(t, 0, r.code, r.err)
	require.True(t, strings.HasPrefix(r.out, "posted "), r.out)
	r = run("ten", "send", "a", "0123456789x")
	require.Equal(t, 1, r.code, r.out)
	require.Contains(t, r.err, "the body is 11 bytes, this world's max_body is 10; nothing was sent")
	r = run("default", "world", "add", "ten", "--max-body", "10")
	require.Equal(t, 0, r.code, r.err)
	require.True(t, strings.HasPrefix(r.out, "exists world=ten "), "--max-body is the same setting: %q", r.out)
	r = run("default", "world", "add", "ten", "--max-body", "11")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.err, "max_body 10 (asked 11)")

	// --max-bytes is bytes: 1000 of them hold a few 100-byte bodies (with
	// their subjects and headers), and full says so.
	r = run("default", "world", "add", "kb", "--max-bytes", "1000", "--max-msg-size", "100", "--json")
	require.Equal(t, 0, r.code, r.err)
	var created map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.out), &created))
	require.EqualValues(t, 1000, created["max_bytes"])
	require.EqualValues(t, 100, created["max_body"])
	require.EqualValues(t, 100000, created["max_msgs"], "the byte limit is not folded into the count")
	body := strings.Repeat("x", 100)
	var posted int
	for posted = 0; posted < 20; posted++ {
		if r = run("kb", "send", "a", body); r.code != 0 {
			break
		}
	}
	require.Equal(t, 16, r.code, "%q %q", r.out, r.err)
	require.Equal(t, "full limit=1000 kind=bytes\n", r.out)
	require.Greater(t, posted, 1)
	require.Less(t, posted, 10)
	r = run("kb", "send", "other", body, "--json")
	require.Equal(t, 16, r.code)
	require.JSONEq(t, `{"outcome":"full","limit":1000,"kind":"bytes"}`, r.out)
	r = run("kb", "world", "info")
	require.Equal(t, 0, r.code, r.err)
	require.Contains(t, r.out, " max_bytes=1000 ")

	// --max-msgs is messages per mailbox.
	r = run("default", "world", "add", "two", "--max-msgs", "2")
	require.Equal(t, 0, r.code, r.err)
	for _, b := range []string{"1", "2"} {
		require.Equal(t, 0, run("two", "send", "a", b).code)
	}
	r = run("two", "send", "a", "3")
	require.Equal(t, 16, r.code)
	require.Equal(t, "full limit=2 kind=messages\n", r.out)
	r = run("two", "send", "a", "3", "--json")
	require.JSONEq(t, `{"outcome":"full","limit":2,"kind":"messages"}`, r.out)

	// Bad limits are refused naming the setting.
	r = run("default", "world", "add", "bad", "--max-body", "1000", "--max-bytes", "999")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.err, "max_bytes: 999 is less than max_body 1000")
	r = run("default", "world", "add", "bad", "--max-body", "1048576")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.err, "over the server's max_payload 1048576")

	// A world made before max_body shows what it enforces: the body its
	// posts always took (max_msg_size less 1 KiB, at most half) and its
	// per-mailbox byte limit as the count it was enforced as.
	old := env.LegacyWorld(t, 100, 100_000, 1000)
	r = run(old, "world", "info")
	require.Equal(t, 0, r.code, r.err)
	require.Contains(t, r.out, " max_body=50 max_headers=50 max_msgs=10 max_bytes=-1 ")
	require.Equal(t, 0, run(old, "send", "a", strings.Repeat("x", 50)).code)
	r = run(old, "send", "a", strings.Repeat("x", 51))
	require.Equal(t, 1, r.code)
	require.Contains(t, r.err, "max_body is 50")
	for range 9 {
		require.Equal(t, 0, run(old, "send", "a", "x").code)
	}
	require.Equal(t, "full limit=10 kind=messages\n", run(old, "send", "a", "x").out)
}
