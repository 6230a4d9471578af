package client_test

import (
	"context"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/queue"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// connectAs connects as a user of u (password: the name), closed by the
// test's end.
func connectAs(t *testing.T, u *testutil.Users, user string) *client.Client {
	t.Helper()
	c, err := client.Connect(u.URL, client.WithAccess(client.Access{User: user, Password: user}))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// storedOn is the number of messages on id's mailbox subject.
func storedOn(t *testing.T, w *client.World, id string) uint64 {
	t.Helper()
	subj := wire.MailboxSubject(w.Name, id)
	info, err := handles.Of(w).Mailbox.Info(testutil.Ctx(t, 10*time.Second), jetstream.WithSubjectFilter(subj))
	require.NoError(t, err)
	return info.State.Subjects[subj]
}

// TestSend_ServerRefusals: a publish the server refuses
// is answered at once as not permitted, and nothing was stored; a refused
// subscription to the reply inbox while a post waits for its
// acknowledgement is answered at once as unknown, never as a refusal: the
// post was stored, and a retry with the same key is its duplicate.
func TestSend_ServerRefusals(t *testing.T) {
	inboxes := []string{"_INBOX.>"}
	u := testutil.StartUsers(t, map[string]*natsserver.Permissions{
		"admin":  nil,
		"noPost": testutil.Allow([]string{"$JS.API.>", "$KV.>"}, inboxes),
		"prod":   testutil.Allow([]string{">"}, inboxes),
	})
	admin := connectAs(t, u, "admin")
	ctx := testutil.Ctx(t, time.Minute)
	aw, err := admin.CreateWorld(ctx, "w", world.Config{})
	require.NoError(t, err)

	t.Run("publish", func(t *testing.T) {
		w, err := connectAs(t, u, "noPost").World(ctx, "w")
		require.NoError(t, err)
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		start := time.Now()
		_, err = w.Send(sctx, "a", []byte("x"), client.WithMsgID("k1"))
		require.ErrorIs(t, err, client.ErrNotPermitted)
		require.NotErrorIs(t, err, queue.ErrUnknown, "a refused publish stored nothing: %v", err)
		var refused *client.SendRefusedError
		require.ErrorAs(t, err, &refused)
		require.Equal(t, "publish", refused.Refusal.Op)
		require.ErrorContains(t, err, "nothing was stored")
		require.Less(t, time.Since(start), 10*time.Second, "answered at the refusal, not at the timeout")
		require.Zero(t, storedOn(t, aw, "a"))
	})

	t.Run("reply inbox", func(t *testing.T) {
		w, err := connectAs(t, u, "prod").World(ctx, "w")
		require.NoError(t, err)
		// A mailbox stream that acknowledges nothing holds the post's
		// wait open until the refusal comes.
		mb := handles.Of(aw).Mailbox.CachedInfo().Config
		mb.NoAck = true
		_, err = admin.JetStream().UpdateStream(ctx, mb)
		require.NoError(t, err)
		type result struct {
			err  error
			took time.Duration
		}
		done := make(chan result, 1)
		go func() {
			sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			start := time.Now()
			_, err := w.Send(sctx, "b", []byte("y"), client.WithMsgID("k2"))
			done <- result{err, time.Since(start)}
		}()
		testutil.WaitFor(t, 10*time.Second, "the post stored", func() bool { return storedOn(t, aw, "b") == 1 })
		u.SetPermissions(t, "prod", testutil.Allow([]string{">"}, []string{"elsewhere.>"}))
		r := <-done
		require.ErrorIs(t, r.err, queue.ErrUnknown, "the post is stored: its outcome is unknown, not refused: %v", r.err)
		require.ErrorContains(t, r.err, "may be stored")
		var np *client.NotPermittedError
		require.ErrorAs(t, r.err, &np, "the refusal is the cause")
		require.Equal(t, "subscription", np.Op)
		require.Less(t, r.took, 15*time.Second, "answered at the refusal, not at the timeout")

		mb.NoAck = false
		_, err = admin.JetStream().UpdateStream(ctx, mb)
		require.NoError(t, err)
		u.SetPermissions(t, "prod", testutil.Allow([]string{">"}, inboxes))
		w, err = connectAs(t, u, "prod").World(ctx, "w")
		require.NoError(t, err)
		p, err := w.Send(ctx, "b", []byte("y"), client.WithMsgID("k2"))
		require.NoError(t, err)
		require.True(t, p.Duplicate, "the retry with the same key finds the stored post")
		require.Equal(t, uint64(1), storedOn(t, aw, "b"))
	})
}
