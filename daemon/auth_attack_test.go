package daemon_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/daemon"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/internal/inbox"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/metrics"
	"github.com/fencepost/fencepost/server"
	"github.com/fencepost/fencepost/server/servertest"
	"github.com/fencepost/fencepost/testkit/testutil"
)

// The attack suite of what a role can read (docs/security.md): raw nats.go
// programs with a role's credentials against a real fencepostd --auth, and
// the monitoring port. docs/security.md's trust model names these tests.

// spy is a raw nats.go connection of an attacker: every message its
// subscriptions receive, and every error the server reports to it.
type spy struct {
	nc   *nats.Conn
	subs []*nats.Subscription
	msgs []*nats.Msg
	mu   sync.Mutex
	errs []string
}

func (a *authed) spy(t *testing.T, role string, opts ...nats.Option) *spy {
	t.Helper()
	creds, err := daemon.ReadCreds(daemon.CredsFile(a.dir, role))
	require.NoError(t, err)
	s := &spy{}
	s.nc, err = nats.Connect(a.d.ClientURL(), append([]nats.Option{creds.NATSOption(), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		s.mu.Lock()
		s.errs = append(s.errs, err.Error())
		s.mu.Unlock()
	})}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(s.nc.Close)
	return s
}

// accountSpy connects as a user of the account whose seed is seed in the
// data dir's auth directory, allowed to publish and subscribe to
// everything: not a user fencepostd issues (a control of what there is
// to see in that account).
func (a *authed) accountSpy(t *testing.T, seed string) *spy {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(a.dir, "auth", seed))
	require.NoError(t, err)
	account, err := nkeys.FromSeed(bytes.TrimSpace(b))
	require.NoError(t, err)
	path, _ := testutil.UserCreds(t, account, func(_ string, uc *jwt.UserClaims) {
		uc.Pub.Allow.Add(">")
		uc.Sub.Allow.Add(">")
	})
	s := &spy{}
	s.nc, err = nats.Connect(a.d.ClientURL(), nats.UserCredentials(path), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		s.mu.Lock()
		s.errs = append(s.errs, err.Error())
		s.mu.Unlock()
	}))
	require.NoError(t, err)
	t.Cleanup(s.nc.Close)
	return s
}

// listen subscribes to subject and keeps what arrives. A synchronous
// subscription takes each message off the socket in order, so that after a
// flush (got) everything the server sent before is in.
func (s *spy) listen(t *testing.T, subject string) {
	t.Helper()
	sub, err := s.nc.SubscribeSync(subject)
	require.NoError(t, err, "nats.go sends the subscription; the server decides")
	s.subs = append(s.subs, sub)
}

// refused waits for the server's refusal of a publish or a subscription.
func (s *spy) refused(t *testing.T, op, subject string) {
	t.Helper()
	want := fmt.Sprintf("Permissions Violation for %s to %q", op, subject)
	servertest.CheckFor(t, 3*time.Second, 5*time.Millisecond, func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, e := range s.errs {
			if strings.Contains(e, want) {
				return nil
			}
		}
		return fmt.Errorf("no %s among the server's errors %q", want, s.errs)
	})
}

// got is what the spy's subscriptions received, after a round trip to the
// server: everything the server delivered before that is in.
func (s *spy) got(t *testing.T) []*nats.Msg {
	t.Helper()
	require.NoError(t, s.nc.Flush())
	for _, sub := range s.subs {
		for {
			m, err := sub.NextMsg(time.Millisecond)
			if err != nil {
				break
			}
			s.msgs = append(s.msgs, m)
		}
	}
	return s.msgs
}

// TestAttack_InboxesArePrivate: a producer that subscribes to "_INBOX.>",
// to another user's inbox prefix, to the mailbox subjects or to the bucket's
// subjects is refused by the server, and while owners claim, watch and
// drain and producers post, it receives nothing: no mailbox body, no
// ownership record, no acknowledgement of another user. An owner is
// likewise confined to its own inbox. A user of the owners' account that
// may subscribe to ">" sees the same traffic: there was something to
// steal. What stays: the users
// of one role are one user, so a producer's own prefix carries the other
// producers' publish acknowledgements (sequence numbers, no bodies).
func TestAttack_InboxesArePrivate(t *testing.T) {
	a := startAuthed(t)
	ctx := testutil.Ctx(t, 20*time.Second)
	users := map[string]string{}
	for _, role := range daemon.Roles {
		creds, err := daemon.ReadCreds(daemon.CredsFile(a.dir, role))
		require.NoError(t, err)
		users[role], err = creds.User()
		require.NoError(t, err)
		want := inbox.ForUser(users[role])
		if role == daemon.RoleOperator {
			want = "" // the operator may subscribe to everything: nats.go's default inbox
		}
		require.Equal(t, want, creds.InboxPrefix(), role)
	}
	prodInbox, ownInbox := inbox.ForUser(users[daemon.RoleProducer]), inbox.ForUser(users[daemon.RoleOwner])

	eve := a.spy(t, daemon.RoleProducer)
	for _, subj := range []string{"_INBOX.>", ">", ownInbox + ".>", inbox.ForUser(users[daemon.RoleOperator]) + ".>", "_INBOX.*", wire.MailboxFilter("default"), "fp.default.>", "$KV.fp_default.>", "$JS.ACK.>"} {
		eve.listen(t, subj)
		eve.refused(t, "Subscription", subj)
	}
	mallory := a.spy(t, daemon.RoleOwner)
	for _, subj := range []string{"_INBOX.>", prodInbox + ".>", wire.MailboxFilter("default"), "$KV.fp_default.>"} {
		mallory.listen(t, subj)
		mallory.refused(t, "Subscription", subj)
	}
	// The spies' own inboxes: allowed.
	eve.listen(t, prodInbox+".>")
	mallory.listen(t, ownInbox+".>")
	// The control: a user of the owners' account (made with its key, not
	// one fencepostd issues) that may subscribe to everything. The
	// owners' replies are in that account; the store account's users
	// (the operator) no longer see them.
	ops := a.accountSpy(t, "owners.nk")
	ops.listen(t, "_INBOX.>")
	for _, s := range []*spy{eve, mallory, ops} {
		require.NoError(t, s.nc.Flush(), "the subscriptions are in place before anyone works")
	}

	// Everyone else works as usual, each on its own inbox: the producer
	// through client.WithCreds, as the CLI connects.
	pc, err := client.Connect(a.d.ClientURL(), client.WithCreds(daemon.CredsFile(a.dir, daemon.RoleProducer)))
	require.NoError(t, err)
	defer pc.Close()
	pw, err := pc.World(ctx, "default")
	require.NoError(t, err)
	o := a.as(t, daemon.RoleOwner)
	op := a.as(t, daemon.RoleOperator)
	events, err := o.w.Ownership.Watch(ctx, "")
	require.NoError(t, err)
	_, err = pw.Send(ctx, "secret-id", []byte("the secret body"))
	require.NoError(t, err)
	l, err := o.w.Ownership.Claim(ctx, "secret-id", "node-secret", time.Minute)
	require.NoError(t, err)
	select { // the claim, sent to the watcher's inbox
	case <-events:
	case <-ctx.Done():
		t.Fatal("no watch event")
	}
	res, err := o.w.Drainer.DrainLease(ctx, l, func(_ context.Context, m drain.Message) error {
		require.Equal(t, "the secret body", string(m.Body))
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, 1, res.Acked)
	_, err = op.w.Ownership.Claim(ctx, "ops-id", "node-ops", time.Minute)
	require.NoError(t, err)
	require.Empty(t, o.violations(0), "the owner works within its own inbox")
	require.Empty(t, op.violations(0))

	// Control: a user of the owners' account that may subscribe to
	// everything saw the body on the owner's inbox and the record its
	// watch was sent.
	var body, record bool
	for _, m := range ops.got(t) {
		body = body || strings.HasPrefix(m.Subject, ownInbox+".") && bytes.Contains(m.Data, []byte("the secret body"))
		record = record || bytes.Contains(m.Data, []byte(`"node":"node-secret"`))
	}
	require.True(t, body && record, "control: there was something to steal on the inboxes")
	// Only the spies' own inboxes delivered anything: the refused
	// subscriptions got nothing. The producer's held no body and no record.
	for _, m := range eve.got(t) {
		require.Equal(t, prodInbox+".>", m.Sub.Subject, "the producer got %s", m.Subject)
		require.NotContains(t, string(m.Data), "secret body")
		require.NotContains(t, string(m.Data), "node-secret")
		require.NotContains(t, string(m.Data), "node-ops")
	}
	for _, m := range mallory.got(t) {
		require.Equal(t, ownInbox+".>", m.Sub.Subject, "the owner got %s", m.Subject)
	}
	var prodAcks int
	for _, m := range eve.got(t) {
		if strings.Contains(string(m.Data), `"stream":"FP_MB_default"`) {
			prodAcks++
		}
	}
	require.Equal(t, 1, prodAcks, "admitted: the other producer's publish acknowledgement (same user, same prefix)")
}

// TestAttack_ProducerCannotListOrRead: a producer's requests for stream
// info (with subjects_filter ">": every id with mail, every record,
// cursor, lock and node key), stream and consumer lists, account info, and
// direct gets other than its world's settings entry are refused by the
// server and answered with nothing. The settings entry's direct get
// answers that entry and nothing else: a sequence, a batch or another
// subject in its request is refused by the stream (408).
func TestAttack_ProducerCannotListOrRead(t *testing.T) {
	a := startAuthed(t)
	ctx := testutil.Ctx(t, 10*time.Second)
	o := a.as(t, daemon.RoleOwner)
	p := a.as(t, daemon.RoleProducer)
	_, err := p.w.Send(ctx, "victim", []byte("mail"))
	require.NoError(t, err)
	_, err = o.w.Ownership.Claim(ctx, "victim", "node-victim", time.Minute)
	require.NoError(t, err)

	eve := a.spy(t, daemon.RoleProducer)
	replies := eve.nc.NewRespInbox()
	eve.listen(t, replies)
	kv := "$KV.fp_default."
	for _, r := range []struct{ subject, body string }{
		{"$JS.API.STREAM.INFO.FP_MB_default", `{"subjects_filter":">"}`},
		{"$JS.API.STREAM.INFO.KV_fp_default", `{"subjects_filter":">"}`},
		{"$JS.API.STREAM.LIST", `{}`},
		{"$JS.API.STREAM.NAMES", `{}`},
		{"$JS.API.CONSUMER.LIST.FP_MB_default", `{}`},
		{"$JS.API.CONSUMER.NAMES.KV_fp_default", `{}`},
		{"$JS.API.INFO", ``},
		{"$JS.API.CONSUMER.CREATE.FP_MB_default", `{"stream_name":"FP_MB_default","config":{"ack_policy":"none"}}`},
		{"$JS.API.DIRECT.GET.KV_fp_default", `{"multi_last":["` + kv + `>"]}`},
		{"$JS.API.DIRECT.GET.FP_MB_default", `{"seq":1}`},
		{"$JS.API.DIRECT.GET.FP_MB_default." + wire.MailboxSubject("default", "victim"), ``},
		{"$JS.API.DIRECT.GET.KV_fp_default." + kv + "o." + wire.EncodeID("victim"), ``},
		{"$JS.API.DIRECT.GET.KV_fp_default." + kv + "*", ``},
		{"$JS.API.DIRECT.GET.KV_fp_default." + kv + ">", ``},
		{"$JS.API.STREAM.MSG.GET.KV_fp_default", `{"last_by_subj":"` + kv + `o.` + wire.EncodeID("victim") + `"}`},
	} {
		require.NoError(t, eve.nc.PublishRequest(r.subject, replies, []byte(r.body)))
		eve.refused(t, "Publish", r.subject)
	}
	require.Empty(t, eve.got(t), "no answer to a refused request")

	// The one read a producer has: its world's settings entry, and only that.
	settings := "$JS.API.DIRECT.GET.KV_fp_default." + kv + wire.WorldKey
	m, err := eve.nc.RequestWithContext(ctx, settings, nil)
	require.NoError(t, err)
	require.Contains(t, string(m.Data), "fencepost.world.config")
	require.Equal(t, kv+wire.WorldKey, m.Header.Get("Nats-Subject"))
	for _, body := range []string{`{"seq":1}`, `{"batch":100}`, `{"next_by_subj":"` + kv + `>"}`, `{"multi_last":["` + kv + `>"]}`, `{"last_by_subj":"` + kv + `o.` + wire.EncodeID("victim") + `"}`, `{"start_time":"2000-01-01T00:00:00Z"}`, `not json`} {
		m, err := eve.nc.RequestWithContext(ctx, settings, []byte(body))
		require.NoError(t, err, body)
		require.Empty(t, m.Data, body)
		require.Contains(t, []string{"408"}, m.Header.Get("Status"), "%s: %v", body, m.Header)
	}
}

// monitored starts fencepostd --auth with args and its log in a buffer;
// it returns the daemon (nil with the start's error) and the log.
func monitored(t *testing.T, args ...string) (*started, *syncBuffer, error) {
	t.Helper()
	argv := append([]string{"--auth", "--port", "-1", "--data", t.TempDir(), "--scrape-interval", "100ms", "--log-level", "warn"}, args...)
	cfg, err := daemon.Parse(argv, io.Discard)
	if err != nil {
		return nil, nil, err
	}
	logs := &syncBuffer{}
	reg := prometheus.NewRegistry()
	s := &started{set: metrics.New(reg), reg: reg, done: make(chan error, 1)}
	s.d, err = daemon.Start(cfg, daemon.WithMetrics(s.set, reg), daemon.WithLogger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	if err != nil {
		return nil, logs, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.stop = cancel
	go func() { s.done <- s.d.Run(ctx) }()
	t.Cleanup(func() { s.shutdown(t) })
	return s, logs, nil
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// getAt answers GET path on the daemon's HTTP port, dialled on loopback.
func getAt(t *testing.T, s *started, path string) int {
	t.Helper()
	_, port, err := net.SplitHostPort(s.d.HTTPAddr())
	require.NoError(t, err)
	resp, err := http.Get("http://127.0.0.1:" + port + path)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}

var natsMonitoringPaths = []string{"/connz?auth=true", "/subsz?subs=1", "/jsz?streams=1&consumers=1", "/varz", "/accountz", "/routez", "/stacksz"}

// TestAttack_MonitoringNotPublicUnderAuth: under --auth, nats-server's
// monitoring (which answers without credentials: user JWTs in
// /connz?auth=true, subscriptions, streams) on an address other machines
// reach is refused at start, by flag, config file or nats-server config
// file, unless --http-public accepts it; --nats-monitoring=false leaves
// /metrics and the health checks there without it; on loopback it runs,
// with a warning at start.
func TestAttack_MonitoringNotPublicUnderAuth(t *testing.T) {
	for _, args := range [][]string{
		{"--http", "0.0.0.0:0"},
		{"--http", ":0"},
		{"--http", "[::]:0"},
		{"--host", "0.0.0.0", "--http-port", "18222"},
	} {
		_, _, err := monitored(t, args...)
		require.ErrorIs(t, err, daemon.ErrConfig, "%v", args)
		require.ErrorContains(t, err, "--http-public", "%v", args)
		require.ErrorContains(t, err, "user JWT", "%v", args)
	}
	conf := filepath.Join(t.TempDir(), "fp.json")
	require.NoError(t, os.WriteFile(conf, []byte(`{"auth":true,"http":"0.0.0.0:0"}`), 0o600))
	_, _, err := monitored(t, "--config", conf)
	require.ErrorIs(t, err, daemon.ErrConfig, "the config file too")
	// Without --auth nothing changes (there are no credentials to protect).
	_, err = daemon.Parse([]string{"--http", "0.0.0.0:0"}, io.Discard)
	require.NoError(t, err)

	t.Run("loopback: served, with a warning", func(t *testing.T) {
		s, logs, err := monitored(t, "--http", "127.0.0.1:0")
		require.NoError(t, err)
		s.waitReady(t)
		require.Contains(t, logs.String(), "monitoring answers without credentials")
		require.Contains(t, logs.String(), "public=false")
		require.Equal(t, http.StatusOK, getAt(t, s, "/connz?auth=true"), "on loopback, as documented")
	})
	t.Run("public metrics only", func(t *testing.T) {
		s, logs, err := monitored(t, "--http", "0.0.0.0:0", "--nats-monitoring=false")
		require.NoError(t, err)
		s.waitReady(t)
		require.Equal(t, http.StatusOK, getAt(t, s, "/metrics"), "fencepost's /metrics stays")
		require.Equal(t, http.StatusOK, getAt(t, s, "/healthz"))
		require.Equal(t, http.StatusOK, getAt(t, s, "/readyz"))
		for _, path := range append(natsMonitoringPaths, "/healthz/nats") {
			require.Equal(t, http.StatusNotFound, getAt(t, s, path), path)
		}
		require.NotContains(t, logs.String(), "monitoring answers without credentials")
	})
	t.Run("public, accepted explicitly", func(t *testing.T) {
		s, logs, err := monitored(t, "--http", "0.0.0.0:0", "--http-public")
		require.NoError(t, err)
		s.waitReady(t)
		require.Contains(t, logs.String(), "monitoring answers without credentials")
		require.Contains(t, logs.String(), "public=true")
		for _, path := range natsMonitoringPaths {
			require.Equal(t, http.StatusOK, getAt(t, s, path), path)
		}
	})
	t.Run("nats-server's own monitoring port from --nats-config", func(t *testing.T) {
		port := freeTCPPort(t)
		nc := filepath.Join(t.TempDir(), "nats.conf")
		require.NoError(t, os.WriteFile(nc, fmt.Appendf(nil, "http: \"0.0.0.0:%d\"\n", port), 0o600))
		_, _, err := monitored(t, "--http", "off", "--nats-config", nc)
		require.ErrorIs(t, err, server.ErrConfig)
		require.ErrorContains(t, err, "--http-public")
		require.NoError(t, os.WriteFile(nc, fmt.Appendf(nil, "http: \"127.0.0.1:%d\"\n", port), 0o600))
		s, logs, err := monitored(t, "--http", "127.0.0.1:0", "--nats-config", nc)
		require.NoError(t, err)
		s.waitReady(t)
		require.Contains(t, logs.String(), "monitoring answers without credentials")
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/varz", port))
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, "served on loopback, as the file says")
	})
}
