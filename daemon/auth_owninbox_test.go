package daemon_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/testkit/testutil"
)

// TestDaemon_CredsWithPrivateInbox: fencepostd's own connection, given
// --creds of a user whose replies are confined to an inbox of its own
// (the rule fencepostd --auth gives its producers and owners, here with
// every other subject allowed), uses that inbox as `fencepost --creds`
// does (client.WithCreds). With nats.go's default inbox it would get no
// answer to any request, and never be ready.
func TestDaemon_CredsWithPrivateInbox(t *testing.T) {
	a := startAuthed(t)
	seed, err := os.ReadFile(filepath.Join(a.dir, "auth", "account.nk"))
	require.NoError(t, err)
	account, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(seed))))
	require.NoError(t, err)
	path, _ := testutil.UserCreds(t, account, func(pub string, uc *jwt.UserClaims) {
		uc.Name = "ops-with-own-inbox"
		uc.Permissions.Pub.Allow.Add(">")
		uc.Permissions.Sub.Allow.Add("_INBOX."+pub+".>", "$JS.EVENT.ADVISORY.>")
	})

	s := startDaemon(t, t.TempDir(), "--nats", a.d.ClientURL(), "--creds", path, "--world", "inboxed")
	s.waitReady(t)
	s.waitMetric(t, `fencepost_world_records{world="inboxed"}`, 0)
}
