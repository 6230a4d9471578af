package daemon_test

import (
	"context"
	"fmt"
	"log/slog"
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
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/server/servertest"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/worker"
)

// The attack suite of per-node identities (docs/security.md): owners bound to
// their node by `fencepostd creds add --role owner --node N`, against a
// real fencepostd --auth.

// node issues node's owner credentials in the daemon's data dir.
func (a *authed) node(t *testing.T, node string) daemon.Issued {
	t.Helper()
	is, err := daemon.IssueCreds(a.dir, daemon.IssueRequest{Role: daemon.RoleOwner, Node: node})
	require.NoError(t, err)
	require.Equal(t, daemon.NodeCredsFile(a.dir, node), is.File)
	return is
}

// asFile connects with the credentials at path, as the CLI does
// (client.WithCreds: the file is read again at every reconnection).
func (a *authed) asFile(t *testing.T, path string, opts ...nats.Option) *roleConn {
	t.Helper()
	return a.asFileWith(t, path, []client.Option{client.WithTimeout(500 * time.Millisecond)}, opts...)
}

// asFileWith is asFile with client options (they replace its timeout).
func (a *authed) asFileWith(t *testing.T, path string, copts []client.Option, opts ...nats.Option) *roleConn {
	t.Helper()
	r := &roleConn{}
	c, err := client.Connect(a.d.ClientURL(), append([]client.Option{client.WithTimeout(500 * time.Millisecond), client.WithCreds(path), client.WithNATSOptions(append([]nats.Option{
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			r.mu.Lock()
			r.vs = append(r.vs, err.Error())
			r.mu.Unlock()
		})}, opts...)...)}, copts...)...)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	r.c = c
	r.w, err = c.World(testutil.Ctx(t, 5*time.Second), "default")
	require.NoError(t, err, path+" opens the world")
	return r
}

// bucket is the world's bucket through r's connection.
func (r *roleConn) bucket(t *testing.T) jetstream.KeyValue {
	t.Helper()
	kv, err := r.c.JetStream().KeyValue(testutil.Ctx(t, 5*time.Second), wire.Bucket("default"))
	require.NoError(t, err)
	return kv
}

// nodeLease reads node's lease record and its revision as the operator.
func nodeLease(t *testing.T, kv jetstream.KeyValue, node string) (wire.Record, uint64) {
	t.Helper()
	e, err := kv.Get(testutil.Ctx(t, 5*time.Second), wire.NodeKey(node))
	require.NoError(t, err)
	rec, err := wire.DecodeRecord(e.Value())
	require.NoError(t, err)
	return rec, e.Revision()
}

// TestAttack_NodeCredsCannotTouchAnotherNodesLease: an owner bound to
// node-a (its own user, its own inbox prefix) holds ids through its own
// node lease as any owner does, but a delete marker on node-b's lease (the
// attack that freed every id of node-b at once), a renewal of it, a
// retire of it (free at its revision) and a purge of it are refused by
// the server; node-b's lease keeps its revision and node-b keeps its id.
// The role-wide owner.creds, bound to no node, is the control: the server
// takes the same delete from it.
func TestAttack_NodeCredsCannotTouchAnotherNodesLease(t *testing.T) {
	a := startAuthed(t)
	ctx := testutil.Ctx(t, 30*time.Second)
	isA, isB := a.node(t, "node-a"), a.node(t, "node-b")
	require.NotEqual(t, isA.User, isB.User, "one user per node")
	b := a.asFile(t, isB.File)
	ssB, err := b.w.Ownership.OpenSession(ctx, "node-b", time.Minute)
	require.NoError(t, err)
	defer ssB.Close()
	_, err = ssB.Claim(ctx, "victim")
	require.NoError(t, err)

	op := a.as(t, daemon.RoleOperator)
	opKV := op.bucket(t)
	before, rev := nodeLease(t, opKV, "node-b")
	require.Equal(t, wire.StateHeld, before.State)

	mallory := a.asFile(t, isA.File)
	require.Equal(t, "_INBOX."+isA.User, mallory.c.Conn().Opts.InboxPrefix, "its own inbox prefix")
	ssA, err := mallory.w.Ownership.OpenSession(ctx, "node-a", time.Minute)
	require.NoError(t, err, "its own node lease: allowed")
	defer ssA.Close()
	_, err = ssA.Claim(ctx, "mallorys")
	require.NoError(t, err, "its other owner rights stay")

	kv := mallory.bucket(t)
	key, subject := wire.NodeKey("node-b"), wire.KeySubject("default", wire.NodeKey("node-b"))
	renewed := before
	renewed.Expires = time.Now().Add(time.Hour)
	renewal, err := wire.EncodeRecord(renewed)
	require.NoError(t, err)
	retired := before
	retired.State, retired.Expires = wire.StateFree, time.Now()
	retire, err := wire.EncodeRecord(retired)
	require.NoError(t, err)
	for what, attempt := range map[string]func(ctx context.Context) error{
		"delete marker on node-b's lease": func(ctx context.Context) error { return kv.Delete(ctx, key) },
		"purge marker on node-b's lease":  func(ctx context.Context) error { return kv.Purge(ctx, key) },
		"renew node-b's lease":            func(ctx context.Context) error { _, err := kv.Update(ctx, key, renewal, rev); return err },
		"retire node-b's live lease":      func(ctx context.Context) error { _, err := kv.Update(ctx, key, retire, rev); return err },
		"unconditional write of node-b's lease": func(ctx context.Context) error {
			_, err := kv.Put(ctx, key, retire)
			return err
		},
	} {
		mallory.refused(t, what, subject, attempt)
	}

	after, revAfter := nodeLease(t, opKV, "node-b")
	require.Equal(t, rev, revAfter, "node-b's lease was not written")
	require.Equal(t, before, after)
	st, err := op.w.Ownership.Owner(ctx, "victim")
	require.NoError(t, err)
	require.True(t, st.Held)
	require.Equal(t, "node-b", st.Node, "node-b keeps its id")
	select {
	case <-ssB.Done():
		t.Fatalf("node-b's session ended: %v", ssB.Err())
	default:
	}

	// Control: the role-wide owner, bound to no node, may write every
	// node lease: the attack the per-node identity refuses.
	wide := a.as(t, daemon.RoleOwner).bucket(t)
	require.NoError(t, wide.Delete(ctx, wire.NodeKey("node-a"), jetstream.LastRevision(mustRev(t, opKV, "node-a"))))
}

func mustRev(t *testing.T, kv jetstream.KeyValue, node string) uint64 {
	t.Helper()
	_, rev := nodeLease(t, kv, node)
	return rev
}

// TestAuth_NodeTakeoverWithNodeCreds: node-a (its own creds) holds an id
// and dies (its session stops renewing, as a killed worker's); node-b,
// which may not write node-a's lease, takes the id over: fencepostd
// retires node-a's lease once it lapsed (free, at the revision node-a
// last wrote), so the takeover writes only the id's record.
func TestAuth_NodeTakeoverWithNodeCreds(t *testing.T) {
	a := startAuthed(t)
	ctx := testutil.Ctx(t, 30*time.Second)
	isA, isB := a.node(t, "node-a"), a.node(t, "node-b")
	na, nb := a.asFile(t, isA.File), a.asFile(t, isB.File)
	ssA, err := na.w.Ownership.OpenSession(ctx, "node-a", time.Second)
	require.NoError(t, err)
	la, err := ssA.Claim(ctx, "x")
	require.NoError(t, err)
	require.NoError(t, ssA.Orphan(), "node-a dies: its node lease is not renewed")

	ssB, err := nb.w.Ownership.OpenSession(ctx, "node-b", 10*time.Second)
	require.NoError(t, err)
	defer ssB.Close()
	op := a.as(t, daemon.RoleOperator)
	kv := op.bucket(t)
	servertest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if rec, _ := nodeLease(t, kv, "node-a"); rec.State != wire.StateFree {
			return fmt.Errorf("node-a's lease is %s until %v", rec.State, rec.Expires)
		}
		return nil
	})
	rec, _ := nodeLease(t, kv, "node-a")
	require.False(t, rec.Expires.Before(la.Expires.Add(-time.Millisecond)), "retired once lapsed, not before: retired at %v, held until %v", rec.Expires, la.Expires)
	lb, err := ssB.Claim(ctx, "x")
	require.NoError(t, err)
	require.Greater(t, lb.Epoch, la.Epoch)
	st, err := op.w.Ownership.Owner(ctx, "x")
	require.NoError(t, err)
	require.Equal(t, "node-b", st.Node)
	require.Equal(t, lb.Epoch, st.Epoch)
	require.Empty(t, nb.violations(0), "node-b never needed to write node-a's lease")
}

// connErr connects with the credentials at path and returns the
// server's answer: nil, or why it refused.
func connErr(url, path string) error {
	nc, err := nats.Connect(url, nats.UserCredentials(path), nats.MaxReconnects(0))
	if err == nil {
		nc.Close()
	}
	return err
}

// TestAttack_RevokedNodeIsClosed: `fencepostd creds revoke --node node-a`
// (daemon.RevokeNode, then daemon.PushAccount to the running server)
// closes node-a's connection at once and refuses its reconnections,
// while node-b, connected all along, keeps renewing its node lease and
// claims; a new connection of node-b is accepted. After a restart of
// fencepostd on the same data dir node-a is still refused. Issued again,
// node-a gets a new key and connects.
func TestAttack_RevokedNodeIsClosed(t *testing.T) {
	a := startAuthed(t)
	ctx := testutil.Ctx(t, 30*time.Second)
	isA, isB := a.node(t, "node-a"), a.node(t, "node-b")
	closed := make(chan struct{})
	na := a.asFile(t, isA.File, nats.ClosedHandler(func(*nats.Conn) { close(closed) }), nats.ReconnectWait(20*time.Millisecond))
	nb := a.asFile(t, isB.File)
	ssA, err := na.w.Ownership.OpenSession(ctx, "node-a", 3*time.Second)
	require.NoError(t, err)
	defer ssA.Orphan()
	ssB, err := nb.w.Ownership.OpenSession(ctx, "node-b", 3*time.Second)
	require.NoError(t, err)
	defer ssB.Close()

	is, err := daemon.RevokeNode(a.dir, "node-a")
	require.NoError(t, err)
	require.Equal(t, isA.User, is.User)
	require.False(t, is.Revoked.IsZero())
	require.NoError(t, daemon.PushAccount(ctx, a.d.ClientURL(), a.dir))

	select {
	case <-closed:
	case <-ctx.Done():
		t.Fatal("node-a's connection was not closed")
	}
	require.Contains(t, na.violations(0), nats.ErrAuthRevoked.Error(), "closed by the revocation")
	require.ErrorIs(t, connErr(a.d.ClientURL(), isA.File), nats.ErrAuthorization, "node-a's reconnection is refused")

	renewals := ssB.Renewals()
	servertest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if ssB.Renewals() < renewals+2 {
			return fmt.Errorf("node-b renewed %d times", ssB.Renewals()-renewals)
		}
		return nil
	})
	_, err = ssB.Claim(ctx, "after-revocation")
	require.NoError(t, err, "node-b works on")
	require.NoError(t, connErr(a.d.ClientURL(), isB.File))

	all, err := daemon.ListCreds(a.dir)
	require.NoError(t, err)
	revoked := map[string]bool{}
	for _, c := range all {
		revoked[c.Role+"/"+c.Node] = !c.Revoked.IsZero()
	}
	require.Equal(t, map[string]bool{"producer/": false, "owner/": false, "operator/": false, "owner/node-a": true, "owner/node-b": false}, revoked)

	// A restart reads the revocation from the data dir.
	a.shutdown(t)
	b := startDaemon(t, a.dir, "--auth")
	b.waitReady(t)
	require.ErrorIs(t, connErr(b.d.ClientURL(), isA.File), nats.ErrAuthorization, "still revoked after a restart")
	require.NoError(t, connErr(b.d.ClientURL(), isB.File))
	again, err := daemon.IssueCreds(a.dir, daemon.IssueRequest{Role: daemon.RoleOwner, Node: "node-a"})
	require.NoError(t, err)
	require.NotEqual(t, isA.User, again.User, "issued again: a new key")
	require.NoError(t, connErr(b.d.ClientURL(), again.File))
}

// TestAuth_NodeWorkersTakeOver: two workers, each with its own node's
// credentials; the one holding an id dies (its connection is cut: no
// release), and the other takes the id over and delivers what is posted
// next, although it may not write the dead node's lease (fencepostd
// retires it).
func TestAuth_NodeWorkersTakeOver(t *testing.T) {
	workersTakeOver(t, 500*time.Millisecond, nil)
}

// TestAuth_NodeWorkersTakeOver_BeforeTheRetire: the same, with
// fencepostd's retire held back 300 ms past the lapse, so that the
// survivor meets the dead node's lapsed lease first and retires it itself:
// the server refuses that write, the survivor learns it at once (the
// refusal is tracked: ownership.WithRefusals), reads again until
// fencepostd retired the lease, and takes over. The workers' requests
// time out after 10 s: a claim that waited for its refused retire's
// answer (as before) took over 10 s after the kill; now it is the ttl
// and the retire's delay, well under 5 s.
func TestAuth_NodeWorkersTakeOver_BeforeTheRetire(t *testing.T) {
	daemon.SetRetireLate(t, 300*time.Millisecond)
	log := &syncBuffer{}
	_, holder, took := workersTakeOver(t, 10*time.Second, slog.New(slog.NewJSONHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug})))
	require.Less(t, took, 5*time.Second, "the takeover waited for the refused retire's timeout")
	refused := false
	for _, line := range strings.Split(log.String(), "\n") {
		if strings.Contains(line, `"msg":"lease retire"`) && strings.Contains(line, `"outcome":"refused"`) && strings.Contains(line, fmt.Sprintf(`"node_lease":%q`, holder)) {
			refused = true
		}
	}
	require.True(t, refused, "the survivor met the lapsed lease of %s before fencepostd retired it (a refused retire)", holder)
}

// workersTakeOver runs the takeover of TestAuth_NodeWorkersTakeOver, the
// workers' clients with request timeout timeout and logger log (nil: the
// default), and returns the survivor's connection, the dead node's name
// and how long the takeover took: from the dead worker's stop to the
// delivery of the message posted after it. The workers run under a
// context without deadline, as `fencepost work` does: a request then ends
// at the client's timeout.
func workersTakeOver(t *testing.T, timeout time.Duration, log *slog.Logger) (*roleConn, string, time.Duration) {
	a := startAuthed(t)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	p := a.as(t, daemon.RoleProducer)
	var mu sync.Mutex
	handled := map[string]string{} // body -> node
	conns, done := map[string]*roleConn{}, map[string]chan error{}
	for _, n := range []string{"node-a", "node-b"} {
		copts := []client.Option{client.WithTimeout(timeout)}
		if log != nil {
			copts = append(copts, client.WithLogger(log.With("client", n)))
		}
		conns[n] = a.asFileWith(t, a.node(t, n).File, copts)
		wk, err := conns[n].w.NewWorker(worker.Config{Node: n, TTL: time.Second, Scan: 200 * time.Millisecond}, func(_ context.Context, m drain.Message) error {
			mu.Lock()
			handled[string(m.Body)] = n
			mu.Unlock()
			return nil
		})
		require.NoError(t, err)
		done[n] = make(chan error, 1)
		go func() { done[n] <- wk.Run(ctx) }()
	}
	deliveredBy := func(body string) string {
		var by string
		servertest.CheckFor(t, 30*time.Second, 50*time.Millisecond, func() error {
			mu.Lock()
			defer mu.Unlock()
			if by = handled[body]; by == "" {
				return fmt.Errorf("%q not delivered", body)
			}
			return nil
		})
		return by
	}
	pctx := testutil.Ctx(t, 30*time.Second)
	_, err := p.w.Queue.Send(pctx, "job", []byte("first"))
	require.NoError(t, err)
	holder := deliveredBy("first")
	survivor := map[string]string{"node-a": "node-b", "node-b": "node-a"}[holder]
	conns[holder].c.Close() // killed: nothing released
	select {
	case err := <-done[holder]:
		t.Logf("%s stopped: %v", holder, err)
	case <-pctx.Done():
		t.Fatal("the dead worker did not stop")
	}
	killed := time.Now()
	_, err = p.w.Queue.Send(pctx, "job", []byte("second"))
	require.NoError(t, err)
	require.Equal(t, survivor, deliveredBy("second"), "taken over by the other node")
	took := time.Since(killed)
	t.Logf("taken over %v after the kill; %s's refusals: %q", took, survivor, conns[survivor].violations(0))
	stop()
	require.NoError(t, <-done[survivor])
	// Each worker wrote records naming its own node only: no writer
	// check fired (writers.go).
	require.LessOrEqual(t, a.metric(t, forgeries(daemon.ForgedRecordNode)), 0.0, "an honest takeover taken for another node's write")
	return conns[survivor], holder, took
}
