package daemon_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/internal/testutil"
)

// TestDaemon_TLSFromNATSConfig: TLS set in the nats-server config file
// applies to clients; fencepostd's own in-process connection needs none.
func TestDaemon_TLSFromNATSConfig(t *testing.T) {
	dir := t.TempDir()
	ca, cert, key := writeTLS(t, dir)
	conf := writeTLSConf(t, dir, ca, cert, key)
	s := startDaemon(t, t.TempDir(), "--nats-config", conf)
	s.waitReady(t)
	_, err := client.Connect(s.d.ClientURL(), client.WithNATSOptions(nats.Timeout(2*time.Second)))
	require.Error(t, err, "without the CA the server's certificate is not trusted")
	c, err := client.Connect(s.d.ClientURL(), client.WithNATSOptions(nats.RootCAs(ca)))
	require.NoError(t, err)
	defer c.Close()
	w, err := c.World(testutil.Ctx(t, 5*time.Second), "default")
	require.NoError(t, err)
	_, err = w.Ownership.Claim(testutil.Ctx(t, 5*time.Second), "x", "n", 0)
	require.NoError(t, err)
}

// writeTLS writes a CA and a server certificate for 127.0.0.1 signed by it.
// writeTLSConf writes a nats-server config file that requires TLS with the
// given files, and returns its path.
func writeTLSConf(t *testing.T, dir, ca, cert, key string) string {
	t.Helper()
	conf := filepath.Join(dir, "nats.conf")
	require.NoError(t, os.WriteFile(conf, fmt.Appendf(nil, "tls { cert_file: %q, key_file: %q, ca_file: %q }\n", cert, key, ca), 0o600))
	return conf
}

func writeTLS(t *testing.T, dir string) (ca, cert, key string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "fencepost test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "fencepostd"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caTmpl, &srvKey.PublicKey, caKey)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(srvKey)
	require.NoError(t, err)
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
		return p
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("server.pem", "CERTIFICATE", srvDER), write("server-key.pem", "EC PRIVATE KEY", keyDER)
}
