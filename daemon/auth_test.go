package daemon_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/daemon"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/queue"
	"github.com/fencepost/fencepost/server"
	"github.com/fencepost/fencepost/server/servertest"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/worker"
	"github.com/fencepost/fencepost/world"
)

// authed is a fencepostd --auth of a test and its data dir.
type authed struct {
	*started
	dir string
}

func startAuthed(t *testing.T) *authed {
	t.Helper()
	dir := t.TempDir()
	s := startDaemon(t, dir, "--auth")
	s.waitReady(t)
	return &authed{started: s, dir: dir}
}

// roleConn is a client of one role, with the permission violations the
// server reported to it.
type roleConn struct {
	c  *client.Client
	w  *client.World
	mu sync.Mutex
	vs []string
}

// violations are the server's errors from the n-th on.
func (r *roleConn) violations(n int) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.vs[min(n, len(r.vs)):], "\n")
}

func (r *roleConn) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.vs)
}

// as connects with the credentials fencepostd wrote for role.
func (a *authed) as(t *testing.T, role string) *roleConn {
	t.Helper()
	creds, err := daemon.ReadCreds(daemon.CredsFile(a.dir, role))
	require.NoError(t, err)
	r := &roleConn{}
	c, err := client.Connect(a.d.ClientURL(), client.WithTimeout(500*time.Millisecond), client.WithNATSOptions(creds.NATSOption(),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			r.mu.Lock()
			r.vs = append(r.vs, err.Error())
			r.mu.Unlock()
		})))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	r.c = c
	r.w, err = c.World(testutil.Ctx(t, 5*time.Second), "default")
	require.NoError(t, err, role+" opens the world")
	return r
}

// refused checks that the server refused op with a clear error, at once
// rather than by a timeout: op's error is the *client.NotPermittedError of
// subject (the first request of op that the role may not make), which the
// server also reported to the connection's error handler.
func (r *roleConn) refused(t *testing.T, what, subject string, op func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n := r.count()
	rctx, done := r.c.Refusable(ctx)
	err := done(op(rctx))
	var np *client.NotPermittedError
	require.ErrorAs(t, err, &np, what+" must be refused as not permitted")
	require.Equal(t, subject, np.Subject, what)
	require.NoError(t, ctx.Err(), what+": ended by the refusal, not by the deadline")
	want := fmt.Sprintf("Permissions Violation for Publish to %q", subject)
	servertest.CheckFor(t, 2*time.Second, 10*time.Millisecond, func() error {
		if !strings.Contains(r.violations(n), want) {
			return fmt.Errorf("%s: no %s among the server's errors:\n%s", what, want, r.violations(n))
		}
		return nil
	})
	t.Logf("%s: %v", what, err)
}

// waitMarked waits until fencepostd wrote down epoch as the highest of
// id (its mark h.<eid>, "Epochs" in docs/security.md): its last write
// after a claim, before a test reads the bucket's last sequence.
func (a *authed) waitMarked(t *testing.T, id string, epoch uint64) {
	t.Helper()
	kv := a.as(t, daemon.RoleOperator).bucket(t)
	servertest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		e, err := kv.Get(testutil.Ctx(t, 2*time.Second), "h."+wire.EncodeID(id))
		if err != nil {
			return err
		}
		if !strings.Contains(string(e.Value()), fmt.Sprintf(`"epoch":%d,`, epoch)) {
			return fmt.Errorf("mark of %s: %s", id, e.Value())
		}
		return nil
	})
}

// TestAuth_NoCredentialsCannotConnect: with --auth the server refuses a
// client without credentials, or with a wrong password; the three creds
// files are written readable by fencepostd's user only.
func TestAuth_NoCredentialsCannotConnect(t *testing.T) {
	a := startAuthed(t)
	for _, role := range daemon.Roles {
		fi, err := os.Stat(daemon.CredsFile(a.dir, role))
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), role)
	}
	_, err := nats.Connect(a.d.ClientURL())
	require.ErrorIs(t, err, nats.ErrAuthorization)
	_, err = nats.Connect(a.d.ClientURL(), nats.UserInfo("fp-operator", "wrong"))
	require.ErrorIs(t, err, nats.ErrAuthorization)
	_, err = client.Connect(a.d.ClientURL())
	require.Error(t, err)
}

// TestAuth_ProducerPostsAndNothingElse: a producer opens the world for
// posting only (it may not read the world's streams) and posts; a claim
// (the record's conditional write), a read of a record (what seize and
// drain do first), a forced seize, a reset, a purge, a world removal, a
// stream delete, a direct overwrite of an ownership record and a dead
// letter are refused by the server (permissions violation) and write
// nothing.
func TestAuth_ProducerPostsAndNothingElse(t *testing.T) {
	a := startAuthed(t)
	op := a.as(t, daemon.RoleOperator)
	ctx := testutil.Ctx(t, 10*time.Second)
	l, err := op.w.Ownership.Claim(ctx, "held", "op-node", time.Minute)
	require.NoError(t, err)

	p := a.as(t, daemon.RoleProducer)
	posted, err := p.w.Send(ctx, "order-1", []byte("hello"))
	require.NoError(t, err)
	require.NotZero(t, posted.Seq)
	// The open asked for the bucket's stream info, was refused, and read
	// the settings entry instead: a refusal the client expected and kept
	// from the connection's error handler. Posting needs nothing else.
	require.Empty(t, p.violations(0), "posting needs nothing the producer lacks")
	require.ErrorIs(t, p.w.Readable(), client.ErrPostOnly)
	require.ErrorIs(t, p.w.Readable(), client.ErrNotPermitted)
	require.True(t, p.w.PostOnly)
	require.Nil(t, p.w.Ownership, "a producer's world has no ownership store")
	require.Nil(t, p.w.Drainer)
	require.Nil(t, p.w.Mailboxes)
	_, err = p.w.NewWorker(worker.Config{Node: "evil"}, func(context.Context, drain.Message) error { return nil })
	require.ErrorIs(t, err, client.ErrPostOnly)
	require.Equal(t, op.w.Config, p.w.Config, "the settings entry holds the world's settings")
	require.Equal(t, op.w.Queue.Limit(), p.w.Queue.Limit())
	require.Equal(t, op.w.Queue.MaxBody(), p.w.Queue.MaxBody())

	a.waitMarked(t, "held", l.Epoch)
	before, err := handles.Of(op.w).Bucket.Info(ctx)
	require.NoError(t, err)
	mbBefore, err := handles.Of(op.w).Mailbox.Info(ctx)
	require.NoError(t, err)

	nc, js := p.c.Conn(), p.c.JetStream()
	request := func(subject string, body []byte) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			_, err := nc.RequestWithContext(ctx, subject, body)
			return err
		}
	}
	rec := wire.RecordSubject("default", "order-1")
	p.refused(t, "claim", rec, func(ctx context.Context) error {
		m := nats.NewMsg(rec)
		m.Data = []byte(`{"v":1,"node":"evil","epoch":1,"state":"held","ttl_ms":60000,"acquired":"2026-01-01T00:00:00Z","expires":"2099-01-01T00:00:00Z"}`)
		m.Header.Set("Nats-Expected-Last-Subject-Sequence", "0")
		_, err := js.PublishMsg(ctx, m)
		return err
	})
	p.refused(t, "read a record (seize, drain)", "$JS.API.STREAM.MSG.GET.KV_fp_default", request("$JS.API.STREAM.MSG.GET.KV_fp_default", fmt.Appendf(nil, `{"last_by_subj":%q}`, wire.RecordSubject("default", "held"))))
	p.refused(t, "direct get of a record", "$JS.API.DIRECT.GET.KV_fp_default."+wire.RecordSubject("default", "held"), request("$JS.API.DIRECT.GET.KV_fp_default."+wire.RecordSubject("default", "held"), nil))
	p.refused(t, "force seize", wire.KeySubject("default", wire.ForceKey("held")), func(ctx context.Context) error {
		_, err := js.Publish(ctx, wire.KeySubject("default", wire.ForceKey("held")), []byte(`{}`))
		return err
	})
	p.refused(t, "reset", "$JS.API.STREAM.INFO.KV_fp_default", func(ctx context.Context) error {
		return p.c.ResetWorld(ctx, "default")
	})
	p.refused(t, "mailbox purge", "$JS.API.STREAM.PURGE.FP_MB_default", request("$JS.API.STREAM.PURGE.FP_MB_default", nil))
	p.refused(t, "bucket purge", "$JS.API.STREAM.PURGE.KV_fp_default", request("$JS.API.STREAM.PURGE.KV_fp_default", nil))
	p.refused(t, "remove", "$JS.API.STREAM.INFO.KV_fp_default", func(ctx context.Context) error {
		return p.c.RemoveWorld(ctx, "default")
	})
	p.refused(t, "stream delete", "$JS.API.STREAM.DELETE.KV_fp_default", func(ctx context.Context) error {
		return p.c.JetStream().DeleteStream(ctx, "KV_fp_default")
	})
	p.refused(t, "record overwrite", wire.RecordSubject("default", "held"), func(ctx context.Context) error {
		_, err := js.Publish(ctx, wire.RecordSubject("default", "held"), []byte(`{"v":1,"node":"evil","epoch":99,"state":"held","ttl_ms":60000,"acquired":"2026-01-01T00:00:00Z","expires":"2099-01-01T00:00:00Z"}`))
		return err
	})
	p.refused(t, "dead letter", wire.DeadLetterSubject("default", "order-1"), func(ctx context.Context) error {
		_, err := js.Publish(ctx, wire.DeadLetterSubject("default", "order-1"), []byte("x"))
		return err
	})
	p.refused(t, "settings entry write", wire.KeySubject("default", wire.WorldKey), func(ctx context.Context) error {
		_, err := js.Publish(ctx, wire.KeySubject("default", wire.WorldKey), []byte(`{}`))
		return err
	})

	// Nothing was written: the bucket and the mailbox stream are as they were.
	after, err := handles.Of(op.w).Bucket.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, before.State.LastSeq, after.State.LastSeq, "no bucket write")
	mbAfter, err := handles.Of(op.w).Mailbox.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, mbBefore.State, mbAfter.State, "mailboxes untouched")
	st, err := op.w.Ownership.Owner(ctx, "held")
	require.NoError(t, err)
	require.Equal(t, "op-node", st.Node)
	require.Equal(t, l.Epoch, st.Epoch)
}

// TestAuth_OwnerHoldsAndDrainsButCannotRemoveOrReset: an owner claims,
// renews, seizes a lapsed lease, releases, drains and dead-letters; it
// cannot delete a stream, reset the bucket or remove the world.
func TestAuth_OwnerHoldsAndDrainsButCannotRemoveOrReset(t *testing.T) {
	a := startAuthed(t)
	ctx := testutil.Ctx(t, 15*time.Second)
	p := a.as(t, daemon.RoleProducer)
	o := a.as(t, daemon.RoleOwner)
	for i := range 3 {
		_, err := p.w.Queue.Send(ctx, "order-1", fmt.Appendf(nil, "m%d", i))
		require.NoError(t, err)
	}
	l, err := o.w.Ownership.Claim(ctx, "order-1", "node-a", time.Minute)
	require.NoError(t, err)
	_, err = o.w.Ownership.Renew(ctx, "order-1", "node-a", time.Minute)
	require.NoError(t, err)
	var got []string
	res, err := o.w.Drainer.DrainLease(ctx, l, func(_ context.Context, m drain.Message) error {
		got = append(got, string(m.Body))
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, 3, res.Acked)
	require.Equal(t, []string{"m0", "m1", "m2"}, got)
	st, err := o.w.Mailboxes.Stat(ctx, "order-1")
	require.NoError(t, err)
	require.Zero(t, st.Depth)
	// The owner purged nothing (it may not); fencepostd's purger removes
	// what the commit covers.
	op := a.as(t, daemon.RoleOperator)
	servertest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		info, err := handles.Of(op.w).Mailbox.Info(ctx, jetstream.WithSubjectFilter(wire.MailboxSubject("default", "order-1")))
		if err != nil {
			return err
		}
		if n := info.State.Msgs; n != 0 {
			return fmt.Errorf("%d committed messages still stored", n)
		}
		return nil
	})

	// Seize of a lapsed lease, and release.
	_, err = o.w.Ownership.Claim(ctx, "short", "node-a", time.Second)
	require.NoError(t, err)
	time.Sleep(1100 * time.Millisecond)
	_, err = o.w.Ownership.Seize(ctx, "short", "node-b", time.Minute, false)
	require.NoError(t, err)
	require.NoError(t, o.w.Ownership.Release(ctx, "short", "node-b"))

	// A deep mailbox: the drain follows it with a consumer of its own
	// once its first read finds two batches or more behind it.
	const deep = 4*drain.DefaultBatch + 1
	sent := make([]*queue.Pending, deep)
	for i := range sent {
		sent[i], err = p.w.Queue.SendAsync("deep", []byte("d"))
		require.NoError(t, err)
	}
	for _, s := range sent {
		_, err := s.Wait(ctx)
		require.NoError(t, err)
	}
	ld, err := o.w.Ownership.Claim(ctx, "deep", "node-a", time.Minute)
	require.NoError(t, err)
	res, err = o.w.Drainer.DrainLease(ctx, ld, func(context.Context, drain.Message) error { return nil })
	require.NoError(t, err)
	require.Equal(t, deep, res.Acked)

	require.Empty(t, o.violations(0), "holding and draining need nothing the owner lacks")
	before, err := handles.Of(o.w).Bucket.Info(ctx)
	require.NoError(t, err)
	_, err = p.w.Queue.Send(ctx, "order-2", []byte("keep me"))
	require.NoError(t, err)
	mbBefore, err := handles.Of(o.w).Mailbox.Info(ctx)
	require.NoError(t, err)
	lh, err := o.w.Ownership.Claim(ctx, "held", "node-a", time.Minute)
	require.NoError(t, err)
	a.waitMarked(t, "held", lh.Epoch)
	before, err = handles.Of(o.w).Bucket.Info(ctx)
	require.NoError(t, err)
	o.refused(t, "force seize", wire.KeySubject("default", wire.ForceKey("held")), func(ctx context.Context) error {
		_, err := o.w.Ownership.Seize(ctx, "held", "node-b", time.Minute, true)
		return err
	})
	o.refused(t, "mailbox purge", "$JS.API.STREAM.PURGE.FP_MB_default", func(ctx context.Context) error {
		return handles.Of(o.w).Mailbox.Purge(ctx)
	})
	o.refused(t, "message delete", "$JS.API.STREAM.MSG.DELETE.FP_MB_default", func(ctx context.Context) error {
		return handles.Of(o.w).Mailbox.DeleteMsg(ctx, mbBefore.State.LastSeq)
	})
	o.refused(t, "dead letter purge", "$JS.API.STREAM.PURGE.FP_MB_default", func(ctx context.Context) error {
		_, err := o.w.Mailboxes.PurgeDeadLetters(ctx, "order-2")
		return err
	})
	// A rollup would wipe every record: the owner may publish to the
	// record subjects, and the bucket refuses it.
	roll := nats.NewMsg(wire.RecordSubject("default", "zz"))
	roll.Header.Set("Nats-Rollup", "all")
	_, err = o.c.JetStream().PublishMsg(ctx, roll)
	require.ErrorContains(t, err, "rollup not permitted")
	o.refused(t, "remove", "$JS.API.STREAM.DELETE.FP_MB_default", func(ctx context.Context) error {
		return o.c.RemoveWorld(ctx, "default")
	})
	o.refused(t, "stream delete", "$JS.API.STREAM.DELETE.KV_fp_default", func(ctx context.Context) error {
		return o.c.JetStream().DeleteStream(ctx, "KV_fp_default")
	})
	o.refused(t, "reset", "$JS.API.STREAM.PURGE.KV_fp_default", func(ctx context.Context) error {
		return o.c.ResetWorld(ctx, "default")
	})
	o.refused(t, "stream update", "$JS.API.STREAM.UPDATE.FP_MB_default", func(ctx context.Context) error {
		_, err := o.c.JetStream().UpdateStream(ctx, jetstream.StreamConfig{Name: "FP_MB_default", Subjects: []string{">"}})
		return err
	})
	after, err := handles.Of(o.w).Bucket.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, before.State.LastSeq, after.State.LastSeq, "records, epochs and cursors survive")
	require.Equal(t, before.State.Msgs, after.State.Msgs)
	// Nothing posted, and the mail nobody committed is all there (the
	// purger may meanwhile have removed committed messages of a and b).
	mbAfter, err := handles.Of(o.w).Mailbox.Info(ctx, jetstream.WithSubjectFilter(wire.MailboxSubject("default", "order-2")))
	require.NoError(t, err)
	require.Equal(t, mbBefore.State.LastSeq, mbAfter.State.LastSeq, "nothing posted")
	require.EqualValues(t, 1, mbAfter.State.Subjects[wire.MailboxSubject("default", "order-2")], "the uncommitted message stays")
	held, err := o.w.Ownership.Owner(ctx, "held")
	require.NoError(t, err)
	require.Equal(t, "node-a", held.Node, "the forced seize wrote nothing")
}

// TestAuth_OperatorDoesEverything: the operator force-seizes, resets,
// removes and creates worlds.
func TestAuth_OperatorDoesEverything(t *testing.T) {
	a := startAuthed(t)
	ctx := testutil.Ctx(t, 15*time.Second)
	o := a.as(t, daemon.RoleOwner)
	op := a.as(t, daemon.RoleOperator)
	_, err := o.w.Ownership.Claim(ctx, "x", "node-a", time.Minute)
	require.NoError(t, err)
	l, err := op.w.Ownership.Seize(ctx, "x", "ops", time.Minute, true)
	require.NoError(t, err)
	require.EqualValues(t, 2, l.Epoch)
	require.NoError(t, op.c.ResetWorld(ctx, "default"))
	st, err := op.w.Ownership.Owner(ctx, "x")
	require.NoError(t, err)
	require.False(t, st.Held)
	require.NoError(t, op.c.RemoveWorld(ctx, "default"))
	_, err = op.c.CreateWorld(ctx, "default", world.Config{})
	require.NoError(t, err)
	_, err = op.c.JetStream().Stream(ctx, "FP_MB_default")
	require.NoError(t, err)
}

// TestAuth_CredsSurviveARestart: a second start on the same data dir
// reads the creds files instead of writing new ones.
func TestAuth_CredsSurviveARestart(t *testing.T) {
	a := startAuthed(t)
	before, err := daemon.ReadCreds(daemon.CredsFile(a.dir, daemon.RoleProducer))
	require.NoError(t, err)
	a.shutdown(t)
	s := startDaemon(t, a.dir, "--auth")
	after, err := daemon.ReadCreds(daemon.CredsFile(a.dir, daemon.RoleProducer))
	require.NoError(t, err)
	ub, err := before.User()
	require.NoError(t, err)
	ua, err := after.User()
	require.NoError(t, err)
	require.Equal(t, ub, ua, "the same user (seed); its JWT is issued again")
	for _, c := range []daemon.Creds{before, after} {
		nc, err := nats.Connect(s.d.ClientURL(), c.NATSOption())
		require.NoError(t, err, "both JWTs are signed by the same account")
		nc.Close()
	}
}

// TestAuth_RefusedWithOtherAuthentication: --auth with --nats, or with a
// nats-server config file that sets up users itself, is a config error.
func TestAuth_RefusedWithOtherAuthentication(t *testing.T) {
	_, err := daemon.Parse([]string{"--auth", "--nats", "nats://127.0.0.1:4222"}, io.Discard)
	require.ErrorIs(t, err, daemon.ErrConfig)
	require.ErrorContains(t, err, "auth")
	conf := filepath.Join(t.TempDir(), "nats.conf")
	require.NoError(t, os.WriteFile(conf, []byte(`authorization { users: [ {user: a, password: b} ] }`), 0o600))
	cfg, err := daemon.Parse([]string{"--auth", "--nats-config", conf, "--port", "-1", "--http", "off", "--data", t.TempDir()}, io.Discard)
	require.NoError(t, err)
	_, err = daemon.Start(cfg)
	require.ErrorIs(t, err, server.ErrConfig)
	require.ErrorContains(t, err, "configures authentication")
}

// TestAuth_OwnerRunsAWorkerAndDeadLetters: a worker (node lease, watch of
// the records, ordered consumer on the mailboxes, drains) runs with the
// owner's credentials; a message that always fails is dead-lettered, then
// reposted and its dead letters purged, all without a permissions
// violation.
func TestAuth_OwnerRunsAWorkerAndDeadLetters(t *testing.T) {
	a := startAuthed(t)
	ctx := testutil.Ctx(t, 20*time.Second)
	p := a.as(t, daemon.RoleProducer)
	o := a.as(t, daemon.RoleOwner)
	var mu sync.Mutex
	var got []string
	wk, err := o.w.NewWorker(worker.Config{Node: "w1", Scan: 200 * time.Millisecond}, func(_ context.Context, m drain.Message) error {
		if string(m.Body) == "poison" {
			return fmt.Errorf("poison")
		}
		mu.Lock()
		got = append(got, string(m.Body))
		mu.Unlock()
		return nil
	})
	require.NoError(t, err)
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- wk.Run(wctx) }()
	_, err = p.w.Queue.Send(ctx, "bad", []byte("poison"))
	require.NoError(t, err)
	_, err = p.w.Queue.Send(ctx, "good", []byte("fine"))
	require.NoError(t, err)
	servertest.CheckFor(t, 15*time.Second, 50*time.Millisecond, func() error {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		dl, err := o.w.Mailboxes.DeadLetters(ctx, "bad", 10)
		if err != nil {
			return err
		}
		if n != 1 || len(dl) != 1 {
			return fmt.Errorf("handled %d, dead letters %d", n, len(dl))
		}
		return nil
	})
	stop()
	require.NoError(t, <-done)
	require.Empty(t, o.violations(0))
	// The worker stopped: its last commits are stored, the poison message
	// is behind the cursor (a dead letter now).
	before, err := o.w.Mailboxes.Stat(ctx, "bad")
	require.NoError(t, err)
	require.Zero(t, before.Depth, "the dead-lettered message is committed: %+v", before)
	// Reposting and purging dead letters delete messages: the operator's.
	// An owner's repost is refused before it posts anything (it used to
	// post, then fail to remove: every message twice).
	o.refused(t, "owner repost", "$JS.API.STREAM.MSG.DELETE.FP_MB_default", func(ctx context.Context) error {
		_, err := o.w.Mailboxes.Repost(ctx, o.w.Queue, "bad")
		return err
	})
	st, err := o.w.Mailboxes.Stat(ctx, "bad")
	require.NoError(t, err)
	require.Zero(t, st.Depth, "a refused repost wrote to the mailbox: %+v", st)
	require.Equal(t, uint64(1), st.DeadLetters)
	op := a.as(t, daemon.RoleOperator)
	n, err := op.w.Mailboxes.Repost(ctx, op.w.Queue, "bad")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	_, err = op.w.Mailboxes.PurgeDeadLetters(ctx, "bad")
	require.NoError(t, err)
	require.Empty(t, op.violations(0))
}

// TestAuth_OwnerKeepsState: a state worker on the owner role's
// credentials commits each message's state with its cursor (the owner may
// write the state keys; without that the batch was refused and every
// message came back).
func TestAuth_OwnerKeepsState(t *testing.T) {
	a := startAuthed(t)
	ctx := testutil.Ctx(t, 20*time.Second)
	p := a.as(t, daemon.RoleProducer)
	o := a.as(t, daemon.RoleOwner)
	wk, err := o.w.NewStateWorker(worker.Config{Node: "s1", Scan: 200 * time.Millisecond}, func(_ context.Context, m drain.Message, st *drain.State) error {
		n := 0
		if v, ok := st.Get("n"); ok {
			n, _ = strconv.Atoi(string(v))
		}
		return st.Put("n", []byte(strconv.Itoa(n+1)))
	})
	require.NoError(t, err)
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- wk.Run(wctx) }()
	for range 3 {
		_, err = p.w.Queue.Send(ctx, "acct", []byte("+1"))
		require.NoError(t, err)
	}
	servertest.CheckFor(t, 15*time.Second, 50*time.Millisecond, func() error {
		st, err := o.w.Mailboxes.ReadState(ctx, "acct")
		if err != nil {
			return err
		}
		if string(st.Values["n"]) != "3" || st.Cursor != 3 {
			return fmt.Errorf("state %q at cursor %d, want n=3 at 3", st.Values, st.Cursor)
		}
		return nil
	})
	stop()
	require.NoError(t, <-done)
	require.Empty(t, o.violations(0))
}

// TestAuth_OwnerMayWriteTheBarrier: the read barrier that confirms an
// answer on a replicated world (ownership, confirm.go) is an owner's
// write to the world's barrier key; under --auth it is permitted, and
// stored only at the record's revision. (The barrier runs on replicated
// worlds only; the write and its permission are the same on this single
// server.) Without the permission every owner and refusal on an R3 world
// failed under --auth.
func TestAuth_OwnerMayWriteTheBarrier(t *testing.T) {
	a := startAuthed(t)
	ctx := testutil.Ctx(t, 20*time.Second)
	o := a.as(t, daemon.RoleOwner)
	l, err := o.w.Ownership.Claim(ctx, "b-1", "node-a", time.Minute)
	require.NoError(t, err)
	js := o.c.JetStream()
	res, err := jsapi.Barrier(ctx, js, wire.BucketStream("default"), wire.BarrierSubject("default"), wire.RecordSubject("default", "b-1"), l.Revision)
	require.NoError(t, err)
	require.Equal(t, jsapi.BarrierStored, res)
	res, err = jsapi.Barrier(ctx, js, wire.BucketStream("default"), wire.BarrierSubject("default"), wire.RecordSubject("default", "b-1"), l.Revision-1)
	require.NoError(t, err)
	require.Equal(t, jsapi.BarrierMoved, res)
	require.Empty(t, o.violations(0))
}

// TestAuth_OwnerForceSeizeRefused: a forced seize first writes the id's
// force key, which only the operator may write, so an owner's is refused
// by the server before the record is touched; the holder keeps the id.
// The operator's goes through and leaves the force key as its trail.
func TestAuth_OwnerForceSeizeRefused(t *testing.T) {
	a := startAuthed(t)
	ctx := testutil.Ctx(t, 10*time.Second)
	o := a.as(t, daemon.RoleOwner)
	l, err := o.w.Ownership.Claim(ctx, "x", "node-a", time.Minute)
	require.NoError(t, err)
	o.refused(t, "force seize", wire.KeySubject("default", wire.ForceKey("x")), func(ctx context.Context) error {
		_, err := o.w.Ownership.Seize(ctx, "x", "node-b", time.Minute, true)
		return err
	})
	// Every path that can force writes the force key first: a session's
	// forced seize is refused at the same key.
	ss, err := o.w.Ownership.OpenSession(ctx, "node-b", 0)
	require.NoError(t, err)
	defer ss.Close()
	o.refused(t, "session force seize", wire.KeySubject("default", wire.ForceKey("x")), func(ctx context.Context) error {
		_, err := ss.Seize(ctx, "x", true)
		return err
	})
	// The library's way to a clear error rather than a timeout: the
	// refusal ends the operation's context and becomes its error.
	rctx, done := o.c.Refusable(ctx)
	_, err = o.w.Ownership.Seize(rctx, "x", "node-b", time.Minute, true)
	err = done(err)
	var np *client.NotPermittedError
	require.ErrorAs(t, err, &np)
	require.ErrorIs(t, err, client.ErrNotPermitted)
	require.Equal(t, wire.KeySubject("default", wire.ForceKey("x")), np.Subject)
	require.NoError(t, ctx.Err(), "ended by the refusal, not by the deadline")

	st, err := o.w.Ownership.Owner(ctx, "x")
	require.NoError(t, err)
	require.Equal(t, "node-a", st.Node)
	require.Equal(t, l.Epoch, st.Epoch)
	_, err = handles.Of(o.w).KV.Get(ctx, wire.ForceKey("x"))
	require.ErrorIs(t, err, jetstream.ErrKeyNotFound, "no force key written")

	op := a.as(t, daemon.RoleOperator)
	l2, err := op.w.Ownership.Seize(ctx, "x", "ops", time.Minute, true)
	require.NoError(t, err)
	require.Equal(t, l.Epoch+1, l2.Epoch)
	e, err := handles.Of(op.w).KV.Get(ctx, wire.ForceKey("x"))
	require.NoError(t, err)
	require.Contains(t, string(e.Value()), `"node":"ops"`)
}
