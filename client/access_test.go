package client_test

import (
	"path/filepath"
	"testing"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/server"
)

// TestWithAccess: a user and password let the client in and a wrong one
// does not; a credentials file that cannot be read and an inbox prefix
// with a wildcard are refused as invalid options before any connection.
func TestWithAccess(t *testing.T) {
	srv, err := server.Start(server.Config{Opts: &natsserver.Options{
		Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		Username: "alice", Password: "s3cret",
	}})
	require.NoError(t, err)
	defer srv.Stop()

	c, err := client.Connect(srv.ClientURL(), client.WithAccess(client.Access{User: "alice", Password: "s3cret"}))
	require.NoError(t, err)
	require.True(t, c.Conn().IsConnected())
	c.Close()

	_, err = client.Connect(srv.ClientURL(), client.WithAccess(client.Access{User: "alice", Password: "wrong"}))
	require.ErrorContains(t, err, "Authorization Violation")

	for what, a := range map[string]client.Access{
		"credentials":  {Creds: filepath.Join(t.TempDir(), "missing.creds")},
		"inbox prefix": {InboxPrefix: "_INBOX.*"},
	} {
		_, err := client.Connect("nats://127.0.0.1:1", client.WithAccess(a))
		require.ErrorIs(t, err, client.ErrInvalidOption, what)
		require.ErrorContains(t, err, what)
	}
}
