package main_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// TestCLI_Send_UnknownIsNotRefused: a post whose
// acknowledgement cannot come, because the server refused the client's
// reply inbox while it waited, was stored: send says unknown (exit 1),
// that the post may be stored and to retry with the same --msg-id, never
// "not permitted"; so does a send that times out. The retry with the
// same --msg-id answers posted ... duplicate. A refused publish says
// not permitted and that nothing was stored.
func TestCLI_Send_UnknownIsNotRefused(t *testing.T) {
	inboxes := []string{"_INBOX.>"}
	u := testutil.StartUsers(t, map[string]*natsserver.Permissions{
		"admin":  nil,
		"noPost": testutil.Allow([]string{"$JS.API.>", "$KV.>"}, inboxes),
		"prod":   testutil.Allow([]string{">"}, inboxes),
	})
	admin, err := client.Connect(u.URL, client.WithAccess(client.Access{User: "admin", Password: "admin"}))
	require.NoError(t, err)
	t.Cleanup(admin.Close)
	ctx := testutil.Ctx(t, time.Minute)
	w, err := admin.CreateWorld(ctx, "w", world.Config{})
	require.NoError(t, err)
	as := func(user string, args ...string) *exec.Cmd {
		cmd := exec.Command(bin, append(args, "--user", user, "--password", user)...)
		cmd.Env = append(os.Environ(), "NATS_URL="+u.URL, "FENCEPOST_WORLD=w")
		return cmd
	}
	run := func(cmd *exec.Cmd) result {
		var so, se bytes.Buffer
		cmd.Stdout, cmd.Stderr = &so, &se
		err := cmd.Run()
		r := result{out: so.String(), err: se.String()}
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			r.code = ee.ExitCode()
		} else {
			require.NoError(t, err)
		}
		return r
	}
	stored := func(id string) uint64 {
		subj := wire.MailboxSubject("w", id)
		info, err := handles.Of(w).Mailbox.Info(ctx, jetstream.WithSubjectFilter(subj))
		require.NoError(t, err)
		return info.State.Subjects[subj]
	}
	noAck := func(on bool) {
		mb := handles.Of(w).Mailbox.CachedInfo().Config
		mb.NoAck = on
		_, err := admin.JetStream().UpdateStream(ctx, mb)
		require.NoError(t, err)
	}

	r := run(as("noPost", "send", "a", "x", "--msg-id", "k1"))
	require.Equal(t, 1, r.code, "%+v", r)
	require.Contains(t, r.err, `error: send to "a": not permitted: the server refused publish to "fp.w.mb.YQ"`)
	require.Contains(t, r.err, "nothing was stored")
	require.Zero(t, stored("a"))

	// The stream stores and does not answer: the send waits until the
	// server refuses its reply inbox.
	noAck(true)
	cmd := as("prod", "send", "b", "y", "--msg-id", "k2", "--timeout", "30s")
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	require.NoError(t, cmd.Start())
	testutil.WaitFor(t, 20*time.Second, "the post stored", func() bool { return stored("b") == 1 })
	u.SetPermissions(t, "prod", testutil.Allow([]string{">"}, []string{"elsewhere.>"}))
	err = cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	r = result{out: so.String(), err: se.String(), code: ee.ExitCode()}
	require.Equal(t, 1, r.code, "%+v", r)
	require.True(t, strings.HasPrefix(r.err, `unknown: send to "b": outcome unknown, the post may be stored`), r.err)
	require.Contains(t, r.err, `refused subscription to "_INBOX.`)
	require.Contains(t, r.err, "retry with the same --msg-id k2")
	require.NotContains(t, r.err, "error: not permitted")
	require.Equal(t, uint64(1), stored("b"))
	u.SetPermissions(t, "prod", testutil.Allow([]string{">"}, inboxes))

	// No answer at all: unknown at the timeout, in text and in JSON.
	r = run(as("prod", "send", "c", "z", "--timeout", "2s"))
	require.Equal(t, 1, r.code, "%+v", r)
	require.True(t, strings.HasPrefix(r.err, `unknown: send to "c": outcome unknown, the post may be stored`), r.err)
	require.Contains(t, r.err, "(fencepost stat c) before you send it again: without --msg-id a retry may store it twice")
	r = run(as("prod", "send", "c", "z", "--timeout", "2s", "--msg-id", "k3", "--json"))
	require.Equal(t, 1, r.code, "%+v", r)
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.out), &m), r.out)
	require.Equal(t, "unknown", m["outcome"])
	require.Contains(t, m["error"], "retry with the same --msg-id k3")

	noAck(false)
	r = run(as("prod", "send", "b", "y", "--msg-id", "k2"))
	require.Equal(t, 0, r.code, "%+v", r)
	require.Regexp(t, `^posted seq=\d+ duplicate\n$`, r.out, "the retry finds the stored post")
	require.Equal(t, uint64(1), stored("b"))
}
