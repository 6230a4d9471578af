package daemon_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/daemon"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/testkit/testutil"
)

// TestAuth_SingleAccountDataDirMoved: a data dir of the single account
// (every user issued by the account the streams live in, as before issue
// 47) is moved to the accounts at the next start: the role files are
// issued again in their accounts, the node and producer files of the data
// dir too, with the same user (so the same inbox prefix); their old copies
// (a worker machine's) are refused, since in the streams' account they
// could write any key through a reply subject; the worlds stay, with
// their mail.
func TestAuth_SingleAccountDataDirMoved(t *testing.T) {
	a := startAuthed(t)
	ctx := testutil.Ctx(t, 30*time.Second)
	node := a.node(t, "node-a")
	shop, err := daemon.IssueCreds(a.dir, daemon.IssueRequest{Role: daemon.RoleProducer, Name: "shop"})
	require.NoError(t, err)
	p := a.as(t, daemon.RoleProducer)
	_, err = p.w.Send(ctx, "kept", []byte("mail from before"))
	require.NoError(t, err)
	a.shutdown(t)

	require.NoError(t, daemon.SingleAccountForTest(a.dir, "default"))
	remote := t.TempDir()
	copyOf := func(path string) string {
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		to := filepath.Join(remote, filepath.Base(filepath.Dir(path))+"-"+filepath.Base(path))
		require.NoError(t, os.WriteFile(to, b, 0o600))
		return to
	}
	oldNode, oldShop, oldProducer := copyOf(node.File), copyOf(shop.File), copyOf(daemon.CredsFile(a.dir, daemon.RoleProducer))
	issuer := func(path string) string {
		c, err := daemon.ReadCreds(path)
		require.NoError(t, err)
		uc, err := jwt.DecodeUserClaims(c.JWT)
		require.NoError(t, err)
		return uc.Issuer
	}
	storeIssuer := issuer(oldNode)
	require.Equal(t, storeIssuer, issuer(oldProducer), "the old layout: one account signs every user")

	s := startDaemon(t, a.dir, "--auth")
	s.waitReady(t)
	moved := &authed{started: s, dir: a.dir}
	for _, old := range []string{oldNode, oldShop, oldProducer} {
		require.ErrorIs(t, connErr(s.d.ClientURL(), old), nats.ErrAuthorization, "an old copy in the streams' account is refused: %s", old)
	}
	all, err := daemon.ListCreds(a.dir)
	require.NoError(t, err)
	for _, is := range all {
		require.True(t, is.Revoked.IsZero(), "%s is not listed as revoked", is.File)
		if is.Role != daemon.RoleOperator {
			require.NotEqual(t, storeIssuer, issuer(is.File), "%s is issued in its account", is.File)
		}
		require.NoError(t, connErr(s.d.ClientURL(), is.File), is.File)
	}
	again, err := daemon.ReadCreds(node.File)
	require.NoError(t, err)
	user, err := again.User()
	require.NoError(t, err)
	require.Equal(t, node.User, user, "the same user: the same inbox prefix")

	nc := moved.asFile(t, node.File)
	l, err := nc.w.Ownership.Claim(ctx, "kept", "node-a", time.Minute)
	require.NoError(t, err)
	var got []string
	_, err = nc.w.Drainer.DrainLease(ctx, l, func(_ context.Context, m drain.Message) error {
		got = append(got, string(m.Body))
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, []string{"mail from before"}, got, "the world and its mail stay")
	sh := moved.asFile(t, shop.File)
	_, err = sh.w.Send(ctx, "kept", []byte("after"))
	require.NoError(t, err)
	_, err = moved.as(t, daemon.RoleOperator).bucket(t).Get(ctx, wire.RecordKey("kept"))
	require.NoError(t, err)
}
