package daemon_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/testkit/testutil"
)

// TestDaemon_MutualTLS: the nats-server config file requires TLS with
// verify: true. A client without a certificate, and one whose certificate
// another CA signed, are refused in the handshake; a client with a
// certificate signed by the CA connects (the server sees its certificate)
// and claims, posts and drains through the fencepost client.
// fencepostd's own in-process connection needs no certificate.
func TestDaemon_MutualTLS(t *testing.T) {
	dir := t.TempDir()
	p := testutil.WritePKI(t, dir)
	s := startDaemon(t, t.TempDir(), "--nats-config", p.MTLSConf(t, dir))
	s.waitReady(t)
	url := s.d.ClientURL()
	rogue, err := tls.LoadX509KeyPair(p.RogueCert, p.RogueKey)
	require.NoError(t, err)

	for _, tc := range []struct {
		name string
		opts []nats.Option
	}{
		{"no client certificate", []nats.Option{nats.RootCAs(p.CA)}},
		// crypto/tls sends no certificate the server did not ask for
		// (its CA is not among those the server names), so this client
		// sends its certificate whatever the server asks.
		{"certificate of another CA", []nats.Option{nats.Secure(&tls.Config{RootCAs: pool(t, p.CA), MinVersion: tls.VersionTLS12,
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &rogue, nil }})}},
	} {
		c, err := client.Connect(url, client.WithNATSOptions(append(tc.opts, nats.Timeout(3*time.Second))...))
		if err == nil {
			c.Close()
		}
		require.Error(t, err, tc.name)
		t.Logf("%s: %v", tc.name, err)
		// Refused in the TLS handshake; with TLS 1.3 the client may
		// learn it as the alert or as the connection closed after it.
		require.Contains(t, err.Error(), "tls", tc.name)
	}

	c, err := client.Connect(url, client.WithNATSOptions(nats.RootCAs(p.CA), nats.ClientCert(p.ClientCert, p.ClientKey), nats.Name("mtls-client")))
	require.NoError(t, err)
	defer c.Close()

	// The server verified the client's certificate: it is on the
	// connection.
	cz, err := s.d.Server().Connz(&natsserver.ConnzOptions{Username: true})
	require.NoError(t, err)
	var subjects []string
	for _, ci := range cz.Conns {
		if ci.Name != "mtls-client" {
			continue
		}
		require.NotEmpty(t, ci.TLSVersion, "the connection is TLS")
		for _, pc := range ci.TLSPeerCerts {
			subjects = append(subjects, pc.Subject)
		}
	}
	require.Len(t, subjects, 1, "one peer certificate on the client's connection")
	require.Contains(t, subjects[0], "CN=fencepost-client")

	ctx := testutil.Ctx(t, 15*time.Second)
	w, err := c.World(ctx, "default")
	require.NoError(t, err)
	l, err := w.Ownership.Claim(ctx, "order/7", "node-a", time.Minute)
	require.NoError(t, err)
	for _, body := range []string{"one", "two"} {
		_, err := w.Queue.Send(ctx, "order/7", []byte(body))
		require.NoError(t, err)
	}
	var got []string
	res, err := w.Drainer.DrainLease(ctx, l, func(_ context.Context, m drain.Message) error {
		got = append(got, string(m.Body))
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, 2, res.Acked)
	require.Equal(t, "one,two", strings.Join(got, ","))
}

// pool is a certificate pool of the PEM file at path.
func pool(t *testing.T, path string) *x509.CertPool {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	p := x509.NewCertPool()
	require.True(t, p.AppendCertsFromPEM(b))
	return p
}
