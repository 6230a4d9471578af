package verify

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
)

// TestStartProxies_KeepsSchemeAndUser: the clients under test reach every
// server URL through a proxy of its own, with the URL's scheme and user,
// the servers' advertised URLs ignored; TLS checks the first server's
// host name.
func TestStartProxies_KeepsSchemeAndUser(t *testing.T) {
	ps, c, err := startProxies(Conn{URL: "tls://u:p@db1.example:4443, nats://db2.example", Access: client.Access{User: "x"}})
	require.NoError(t, err)
	defer ps.close()
	require.Len(t, ps, 2)
	require.Equal(t, "tls://u:p@"+ps[0].Addr()+",nats://"+ps[1].Addr(), c.URL)
	require.True(t, c.Proxied)
	require.Equal(t, "db1.example", c.TLSName)
	require.Equal(t, "x", c.User)
}
