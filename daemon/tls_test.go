package daemon_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/testkit/testutil"
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
	p := testutil.WritePKI(t, dir)
	return p.CA, p.ServerCert, p.ServerKey
}
