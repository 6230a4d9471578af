package daemon_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/daemon"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/testkit/testutil"
)

// TestAttack_NamedProducersArePrivate: producers issued with a name of
// their own (`fencepostd creds add --role producer --name P`) are users of
// their own: one that listens on its whole inbox prefix while another
// posts receives none of the other's publish acknowledgements (holders of
// producer.creds share one prefix and read them:
// TestAttack_InboxesArePrivate), only its own. Revoking one closes it at
// once, and the other posts on.
func TestAttack_NamedProducersArePrivate(t *testing.T) {
	a := startAuthed(t)
	ctx := testutil.Ctx(t, 20*time.Second)
	issue := func(name string) daemon.Issued {
		is, err := daemon.IssueCreds(a.dir, daemon.IssueRequest{Role: daemon.RoleProducer, Name: name})
		require.NoError(t, err)
		require.Equal(t, daemon.ProducerCredsFile(a.dir, name), is.File)
		require.Equal(t, name, is.Name)
		return is
	}
	shop, billing := issue("shop"), issue("billing")
	require.NotEqual(t, shop.User, billing.User)

	creds, err := daemon.ReadCreds(shop.File)
	require.NoError(t, err)
	eve, err := nats.Connect(a.d.ClientURL(), creds.NATSOption())
	require.NoError(t, err)
	defer eve.Close()
	require.Equal(t, "_INBOX."+shop.User, creds.InboxPrefix())
	sub, err := eve.SubscribeSync(creds.InboxPrefix() + ".>")
	require.NoError(t, err)
	require.NoError(t, eve.Flush())

	closed := make(chan struct{})
	b := a.asFile(t, billing.File, nats.ClosedHandler(func(*nats.Conn) { close(closed) }), nats.MaxReconnects(0))
	for range 3 {
		_, err := b.w.Send(ctx, "order", []byte("billing's post"))
		require.NoError(t, err)
	}
	require.NoError(t, eve.Flush())
	_, err = sub.NextMsg(100 * time.Millisecond)
	require.ErrorIs(t, err, nats.ErrTimeout, "none of billing's acknowledgements reached shop's prefix")

	// Control: shop's own post is acknowledged on its prefix.
	m, err := eve.RequestWithContext(ctx, wire.MailboxSubject("default", "order"), []byte("shop's post"))
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(m.Subject, creds.InboxPrefix()+"."), m.Subject)

	is, err := daemon.RevokeProducer(a.dir, "billing")
	require.NoError(t, err)
	require.False(t, is.Revoked.IsZero())
	require.NoError(t, daemon.PushAccount(ctx, a.d.ClientURL(), a.dir))
	select {
	case <-closed:
	case <-ctx.Done():
		t.Fatal("billing's connection was not closed")
	}
	_, err = eve.RequestWithContext(ctx, wire.MailboxSubject("default", "order"), []byte("shop posts on"))
	require.NoError(t, err)
}
