package daemon_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/call"
	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/daemon"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/worker"
)

// TestAttack_CallAnswersArePrivate: under --auth a worker on owner
// credentials answers calls from every role, each on the caller's own
// inbox (the owner may publish to inboxes, an answer crossing from the
// owners' account to the caller's): a named producer, the shared
// producer.creds, an owner bound to another node, and the operator each
// get their answer. A named producer that listens on its whole inbox
// prefix while another calls receives none of the other's answers, and an
// owner may not subscribe to another user's inbox.
func TestAttack_CallAnswersArePrivate(t *testing.T) {
	a := startAuthed(t)
	ctx := testutil.Ctx(t, 30*time.Second)
	o := a.as(t, daemon.RoleOwner)
	wk, err := o.w.NewWorker(worker.Config{Node: "w1", Scan: 200 * time.Millisecond}, drain.CallHandler(func(_ context.Context, m drain.Message) ([]byte, error) {
		return []byte("answer to " + string(m.Body)), nil
	}).Handler())
	require.NoError(t, err)
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- wk.Run(wctx) }()
	defer func() {
		stop()
		require.NoError(t, <-done)
	}()

	issue := func(req daemon.IssueRequest) string {
		is, err := daemon.IssueCreds(a.dir, req)
		require.NoError(t, err)
		return is.File
	}
	shop := issue(daemon.IssueRequest{Role: daemon.RoleProducer, Name: "shop"})
	creds, err := daemon.ReadCreds(shop)
	require.NoError(t, err)
	eve, err := nats.Connect(a.d.ClientURL(), creds.NATSOption())
	require.NoError(t, err)
	defer eve.Close()
	heard, err := eve.SubscribeSync(creds.InboxPrefix() + ".>")
	require.NoError(t, err)
	require.NoError(t, eve.Flush())

	callers := map[string]*roleConn{
		"billing":  a.asFile(t, issue(daemon.IssueRequest{Role: daemon.RoleProducer, Name: "billing"})),
		"producer": a.as(t, daemon.RoleProducer),
		"node n2":  a.asFile(t, issue(daemon.IssueRequest{Role: daemon.RoleOwner, Node: "n2"})),
		"operator": a.as(t, daemon.RoleOperator),
	}
	for who, r := range callers {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		ans, err := r.w.Call(cctx, "order-"+who, []byte(who), client.WithMsgID("k1"))
		cancel()
		require.NoError(t, err, who)
		require.Equal(t, "answer to "+who, string(ans.Body), who)
		require.Empty(t, r.violations(0), who)
	}
	require.NoError(t, eve.Flush())
	_, err = heard.NextMsg(200 * time.Millisecond)
	require.ErrorIs(t, err, nats.ErrTimeout, "none of the other callers' answers reached shop's prefix")
	require.Empty(t, o.violations(0), "the worker's answers were all permitted")

	// Control: shop's own call is answered on its prefix.
	sc := a.asFile(t, shop)
	_, err = sc.w.Call(ctx, "order-shop", []byte("shop"))
	require.NoError(t, err)
	for {
		// The prefix also carries shop's connection's own replies.
		m, err := heard.NextMsg(5 * time.Second)
		require.NoError(t, err)
		if m.Header.Get(call.HeaderOutcome) != "" {
			require.Equal(t, "answer to shop", string(m.Data))
			break
		}
	}

	// An owner cannot listen on a caller's inbox.
	n := o.count()
	_, err = o.c.Conn().SubscribeSync(creds.InboxPrefix() + ".>")
	require.NoError(t, err)
	require.NoError(t, o.c.Conn().Flush())
	testutil.WaitFor(t, 5*time.Second, "the server refuses the owner's subscription", func() bool {
		return o.violations(n) != ""
	})
	require.Contains(t, o.violations(n), "Permissions Violation for Subscription")
	require.False(t, errors.Is(ctx.Err(), context.DeadlineExceeded))
}
