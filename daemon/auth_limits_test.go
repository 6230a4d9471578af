package daemon_test

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/daemon"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/server/servertest"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// The limits and lifetimes of fencepostd --auth's JWTs (docs/security.md), each
// reached against a real server.

func startAuthedWith(t *testing.T, args ...string) *authed {
	t.Helper()
	dir := t.TempDir()
	s := startDaemon(t, dir, append([]string{"--auth"}, args...)...)
	s.waitReady(t)
	return &authed{started: s, dir: dir}
}

// errs collects a raw connection's asynchronous errors.
type errs struct {
	mu  sync.Mutex
	all []string
}

func (e *errs) handler(_ *nats.Conn, _ *nats.Subscription, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.all = append(e.all, err.Error())
}

func (e *errs) has(s string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, x := range e.all {
		if strings.Contains(strings.ToLower(x), strings.ToLower(s)) {
			return nil
		}
	}
	return fmt.Errorf("no %q among %q", s, e.all)
}

// TestAttack_LimitsEnforced: the account's JetStream stream limit refuses
// a world beyond it (--auth-max-streams 3: the default world's three
// streams, its mailboxes, bucket and timers); each account's connection limit (--auth-max-conns) refuses
// a connection of its users beyond it, shuts no other account's users
// out, and takes one again once another closed; a producer may hold 100 subscriptions and
// not one more; a producer's message over --auth-max-payload closes its
// connection and stores nothing, one under it is posted.
func TestAttack_LimitsEnforced(t *testing.T) {
	t.Run("streams and payload", func(t *testing.T) {
		a := startAuthedWith(t, "--auth-max-streams", "3", "--auth-max-payload", "4096")
		ctx := testutil.Ctx(t, 20*time.Second)
		op := a.as(t, daemon.RoleOperator)
		_, err := world.Create(ctx, op.c.JetStream(), "second", world.Config{})
		require.ErrorContains(t, err, "maximum number of streams reached")
		names, err := world.List(ctx, op.c.JetStream())
		require.NoError(t, err)
		require.Equal(t, []string{"default"}, names, "nothing of the refused world was made")

		creds, err := daemon.ReadCreds(daemon.CredsFile(a.dir, daemon.RoleProducer))
		require.NoError(t, err)
		nc, err := nats.Connect(a.d.ClientURL(), creds.NATSOption(), nats.MaxReconnects(0))
		require.NoError(t, err)
		defer nc.Close()
		servertest.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
			if nc.MaxPayload() != 4096 {
				return fmt.Errorf("max payload %d", nc.MaxPayload())
			}
			return nil
		}) // the server tells the client its limit (INFO after CONNECT)
		js, err := op.c.JetStream().Stream(ctx, wire.MailboxStream("default"))
		require.NoError(t, err)
		subject := wire.MailboxSubject("default", "big")
		_, err = nc.Request(subject, bytes.Repeat([]byte("x"), 4000), 5*time.Second)
		require.NoError(t, err, "under the limit: posted")
		require.ErrorIs(t, nc.Publish(subject, bytes.Repeat([]byte("x"), 5000)), nats.ErrMaxPayload, "nats.go refuses it itself")
		// A client that does not check: the server closes it.
		answer := rawPub(t, a.d.ClientURL(), creds, subject, bytes.Repeat([]byte("x"), 5000))
		require.Contains(t, answer, "-ERR 'Maximum Payload Violation'")
		info, err := js.Info(ctx, jetstream.WithSubjectFilter(subject))
		require.NoError(t, err)
		require.Equal(t, uint64(1), info.State.Subjects[subject], "the message over the limit was not stored")
	})

	t.Run("subscriptions of a producer", func(t *testing.T) {
		a := startAuthed(t)
		creds, err := daemon.ReadCreds(daemon.CredsFile(a.dir, daemon.RoleProducer))
		require.NoError(t, err)
		var e errs
		nc, err := nats.Connect(a.d.ClientURL(), creds.NATSOption(), nats.ErrorHandler(e.handler))
		require.NoError(t, err)
		defer nc.Close()
		for i := range 100 {
			_, err := nc.SubscribeSync(fmt.Sprintf("%s.s.%d", creds.InboxPrefix(), i))
			require.NoError(t, err)
		}
		require.NoError(t, nc.Flush())
		require.Error(t, e.has("maximum subscriptions"), "100 are allowed")
		_, err = nc.SubscribeSync(creds.InboxPrefix() + ".s.one-more")
		require.NoError(t, err, "nats.go sends it; the server decides")
		servertest.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error { return e.has("maximum subscriptions exceeded") })
	})

	t.Run("connections of each account", func(t *testing.T) {
		// Each account counts its own: the owners' three are all the
		// owners get, and neither the operator nor a producer is shut
		// out by them (fencepostd's own connection is the store
		// account's, with the operator's).
		a := startAuthedWith(t, "--auth-max-conns", "3")
		path := daemon.CredsFile(a.dir, daemon.RoleOwner)
		var owners []*nats.Conn
		for range 3 {
			nc, err := nats.Connect(a.d.ClientURL(), nats.UserCredentials(path), nats.MaxReconnects(0))
			require.NoError(t, err)
			defer nc.Close()
			owners = append(owners, nc)
		}
		_, err := nats.Connect(a.d.ClientURL(), nats.UserCredentials(path), nats.MaxReconnects(0))
		require.ErrorIs(t, err, nats.ErrMaxAccountConnectionsExceeded)
		for _, role := range []string{daemon.RoleProducer, daemon.RoleOperator} {
			nc, err := nats.Connect(a.d.ClientURL(), nats.UserCredentials(daemon.CredsFile(a.dir, role)), nats.MaxReconnects(0))
			require.NoError(t, err, "%s: not shut out by the owners", role)
			nc.Close()
		}
		owners[1].Close()
		servertest.CheckFor(t, 5*time.Second, 20*time.Millisecond, func() error {
			nc, err := nats.Connect(a.d.ClientURL(), nats.UserCredentials(path), nats.MaxReconnects(0))
			if err != nil {
				return err
			}
			nc.Close()
			return nil
		})
	})
}

// TestAuth_CredsExpireAndRotate: credentials issued for 2s are refused
// once expired, and the server closes a connection that outlives them;
// issued again before they expire (`fencepostd creds add`: same user, new
// JWT), a client that reads the file at every reconnection (nats.go's
// UserCredentials, fencepost's --creds) is closed at the old expiry and
// comes back at once with the new JWT.
func TestAuth_CredsExpireAndRotate(t *testing.T) {
	a := startAuthed(t)
	issue := func(node string, ttl time.Duration) daemon.Issued {
		is, err := daemon.IssueCreds(a.dir, daemon.IssueRequest{Role: daemon.RoleOwner, Node: node, TTL: ttl})
		require.NoError(t, err)
		return is
	}
	stale, rotated := issue("stale", 2*time.Second), issue("rotated", 2*time.Second)
	require.WithinDuration(t, time.Now().Add(2*time.Second), stale.Expires, 1500*time.Millisecond)

	var staleErrs, rotErrs errs
	reconnected := make(chan struct{}, 1)
	sc, err := nats.Connect(a.d.ClientURL(), nats.UserCredentials(stale.File), nats.ErrorHandler(staleErrs.handler), nats.ReconnectWait(50*time.Millisecond))
	require.NoError(t, err)
	defer sc.Close()
	rc, err := nats.Connect(a.d.ClientURL(), nats.UserCredentials(rotated.File), nats.CustomInboxPrefix("_INBOX."+rotated.User),
		nats.ErrorHandler(rotErrs.handler), nats.ReconnectWait(50*time.Millisecond),
		nats.ReconnectHandler(func(*nats.Conn) {
			select {
			case reconnected <- struct{}{}:
			default:
			}
		}))
	require.NoError(t, err)
	defer rc.Close()
	again := issue("rotated", time.Hour) // the rotation, before the expiry
	require.Equal(t, rotated.User, again.User, "same user: same inbox prefix, same node")

	servertest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error { return staleErrs.has("authentication expired") })
	servertest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if !sc.IsClosed() {
			return fmt.Errorf("the expired connection is %v", sc.Status())
		}
		return nil
	})
	// Expiry is in whole seconds: the server accepts the JWT until the
	// second after its expiry, and closes the connection then.
	servertest.CheckFor(t, 3*time.Second, 50*time.Millisecond, func() error {
		_, err := nats.Connect(a.d.ClientURL(), nats.UserCredentials(stale.File), nats.MaxReconnects(0))
		if !errors.Is(err, nats.ErrAuthorization) {
			return fmt.Errorf("expired credentials: %v", err)
		}
		return nil
	})

	servertest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error { return rotErrs.has("authentication expired") })
	select {
	case <-reconnected:
	case <-time.After(10 * time.Second):
		t.Fatal("the rotated client did not come back")
	}
	require.NoError(t, rc.FlushTimeout(5*time.Second))
	require.True(t, rc.IsConnected())
}

// rawPub publishes payload to subject over a bare NATS protocol connection
// authenticated with c (none of nats.go's checks), and returns what the
// server answered until it closed the connection or answered the PING.
func rawPub(t *testing.T, url string, c daemon.Creds, subject string, payload []byte) string {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "nats://"))
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(5*time.Second)))
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	require.NoError(t, err)
	var info struct {
		Nonce string `json:"nonce"`
	}
	require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(line, "INFO ")), &info))
	kp, err := nkeys.FromSeed(c.Seed)
	require.NoError(t, err)
	sig, err := kp.Sign([]byte(info.Nonce))
	require.NoError(t, err)
	connect, err := json.Marshal(map[string]any{"jwt": c.JWT, "sig": base64.RawURLEncoding.EncodeToString(sig), "verbose": false, "pedantic": false, "protocol": 1, "headers": true})
	require.NoError(t, err)
	fmt.Fprintf(conn, "CONNECT %s\r\nPING\r\n", connect)
	line, err = r.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "PONG\r\n", line, "connected")
	fmt.Fprintf(conn, "PUB %s %d\r\n%s\r\nPING\r\n", subject, len(payload), payload)
	var got []string
	for {
		line, err := r.ReadString('\n')
		got = append(got, strings.TrimSpace(line))
		if err != nil || line == "PONG\r\n" {
			return strings.Join(got, "\n")
		}
	}
}
