package testutil

import (
	"maps"
	"sync"
	"testing"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/server"
)

// Users is a single embedded JetStream server whose clients log in as
// users with passwords (each user's password is its name), each with
// permissions of its own. SetPermissions changes a user's permissions by
// a configuration reload, as an operator's edit would: the server drops
// the subscriptions the new permissions no longer allow and tells the
// client (`Permissions Violation for Subscription to ...`).
type Users struct {
	URL string
	srv *server.Server
	dir string

	mu    sync.Mutex
	perms map[string]*natsserver.Permissions // nil: everything
}

// StartUsers starts the server with perms, by user name (nil permissions
// allow everything); it is stopped by t.Cleanup.
func StartUsers(t testing.TB, perms map[string]*natsserver.Permissions) *Users {
	t.Helper()
	u := &Users{dir: t.TempDir(), perms: maps.Clone(perms)}
	s, err := server.Start(server.Config{Opts: u.options()})
	require.NoError(t, err)
	t.Cleanup(s.Stop)
	u.srv, u.URL = s, s.ClientURL()
	return u
}

// Allow is the permissions that allow publishing to pub and subscribing
// to sub, and nothing else.
func Allow(pub, sub []string) *natsserver.Permissions {
	return &natsserver.Permissions{
		Publish:   &natsserver.SubjectPermission{Allow: pub},
		Subscribe: &natsserver.SubjectPermission{Allow: sub},
	}
}

// SetPermissions gives user p (nil: everything) and reloads the server.
func (u *Users) SetPermissions(t testing.TB, user string, p *natsserver.Permissions) {
	t.Helper()
	u.mu.Lock()
	u.perms[user] = p
	opts := u.options()
	u.mu.Unlock()
	require.NoError(t, u.srv.ReloadOptions(opts))
}

// options are the server's options with the users as they are now.
func (u *Users) options() *natsserver.Options {
	o := &natsserver.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: u.dir, NoLog: true, NoSigs: true}
	for name, p := range u.perms {
		o.Users = append(o.Users, &natsserver.User{Username: name, Password: name, Permissions: p})
	}
	return o
}
