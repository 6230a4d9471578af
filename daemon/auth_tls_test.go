package daemon_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/daemon"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/testkit/testutil"
)

// TestAuth_TLSRequiredAndAPlainNATSPost: --auth with TLS required by the
// nats-server config file (certificates made by the test). A plaintext
// client is refused; a client without the CA is refused; a producer posts
// with plain nats.go over TLS, exactly as docs/wire.md says (no fencepost
// code), and an owner drains that message.
func TestAuth_TLSRequiredAndAPlainNATSPost(t *testing.T) {
	dir := t.TempDir()
	ca, cert, key := writeTLS(t, dir)
	conf := writeTLSConf(t, dir, ca, cert, key)
	data := t.TempDir()
	s := startDaemon(t, data, "--auth", "--nats-config", conf)
	s.waitReady(t)
	prod, err := daemon.ReadCreds(daemon.CredsFile(data, daemon.RoleProducer))
	require.NoError(t, err)
	own, err := daemon.ReadCreds(daemon.CredsFile(data, daemon.RoleOwner))
	require.NoError(t, err)
	addr := s.d.Server().Addr().String()

	// Plaintext, by hand: the server announces tls_required and never
	// answers a plaintext CONNECT+PING.
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(3*time.Second)))
	r := bufio.NewReader(conn)
	info, err := r.ReadString('\n')
	require.NoError(t, err)
	require.Contains(t, info, `"tls_required":true`)
	// Valid credentials: the nonce signed with the producer's seed.
	var hello struct {
		Nonce string `json:"nonce"`
	}
	require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(info, "INFO ")), &hello))
	kp, err := nkeys.FromSeed(prod.Seed)
	require.NoError(t, err)
	sig, err := kp.Sign([]byte(hello.Nonce))
	require.NoError(t, err)
	_, err = fmt.Fprintf(conn, "CONNECT {\"jwt\":%q,\"sig\":%q,\"verbose\":false,\"pedantic\":false}\r\nPING\r\n", prod.JWT, base64.RawURLEncoding.EncodeToString(sig))
	require.NoError(t, err)
	rest, rerr := r.ReadString('\n')
	t.Logf("plaintext CONNECT answered %q, %v", rest, rerr)
	require.NotContains(t, rest, "PONG", "a plaintext client must not get through")
	require.Error(t, rerr, "the server closes a plaintext connection")

	// TLS without the CA: the server's certificate is not trusted.
	_, err = nats.Connect("nats://"+addr, prod.NATSOption(), nats.Timeout(2*time.Second))
	require.Error(t, err)

	// The post, with nats.go only: fp.<world>.mb.<base64url(id)>, the
	// acknowledgement on the producer's own inbox prefix (the one its JWT
	// lets it subscribe to: _INBOX.<user public key>).
	user, err := prod.User()
	require.NoError(t, err)
	prefix, err := client.InboxPrefix(prod.JWT)
	require.NoError(t, err)
	require.Equal(t, "_INBOX."+user, prefix)
	nc, err := nats.Connect("tls://"+addr, nats.UserJWTAndSeed(prod.JWT, string(prod.Seed)), nats.CustomInboxPrefix(prefix), nats.RootCAs(ca))
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	m := nats.NewMsg("fp.default.mb." + base64.RawURLEncoding.EncodeToString([]byte("order.42")))
	m.Data = []byte("hello from anywhere")
	m.Header.Set("Fencepost-From", "billing")
	m.Header.Set("Nats-Msg-Id", "billing-1")
	ack, err := js.PublishMsg(testutil.Ctx(t, 5*time.Second), m)
	require.NoError(t, err)
	require.Equal(t, "FP_MB_default", ack.Stream)
	require.NotZero(t, ack.Sequence)

	// The owner drains it, over TLS too.
	c, err := client.Connect(s.d.ClientURL(), client.WithNATSOptions(own.NATSOption(), nats.RootCAs(ca)))
	require.NoError(t, err)
	defer c.Close()
	ctx := testutil.Ctx(t, 10*time.Second)
	w, err := c.World(ctx, "default")
	require.NoError(t, err)
	l, err := w.Ownership.Claim(ctx, "order.42", "node-a", time.Minute)
	require.NoError(t, err)
	var got []drain.Message
	res, err := w.Drainer.DrainLease(ctx, l, func(_ context.Context, m drain.Message) error {
		got = append(got, m)
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, 1, res.Acked)
	require.Equal(t, "hello from anywhere", string(got[0].Body))
	require.Equal(t, "billing", got[0].From)
	require.Equal(t, ack.Sequence, got[0].Seq)
}
