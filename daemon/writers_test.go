package daemon

import (
	"encoding/json"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"
)

// TestWriters_WhoWroteIt: a write seen in flight with the server's
// Nats-Request-Info names its writer to the auditor's lookup of the
// stored message (same subject, value and fence), once: a node owner by
// the node its JWT binds it to, the role-wide owner bound to none, a write
// without the header the store account's. A stored message whose write was
// not seen has no known writer, and one stored before the subscription
// is not waited for.
func TestWriters_WhoWroteIt(t *testing.T) {
	account, err := nkeys.CreateAccount()
	require.NoError(t, err)
	header := func(role, node string) string {
		kp, err := nkeys.CreateUser()
		require.NoError(t, err)
		c, err := issueUser(account, kp, role, node, "default", 0, time.Hour)
		require.NoError(t, err)
		pub, _ := kp.PublicKey()
		b, err := json.Marshal(natsserver.ClientInfo{Account: "OWNERS", User: pub, Jwt: c.JWT})
		require.NoError(t, err)
		return string(b)
	}
	ws := &writers{since: time.Now().Add(-time.Second), changed: make(chan struct{}), pending: map[[32]byte][]writer{}, nodes: map[string]writer{}}
	msg := func(subject, value, info string) *nats.Msg {
		m := nats.NewMsg(subject)
		m.Data = []byte(value)
		m.Header.Set("Nats-Expected-Last-Subject-Sequence", "7")
		if info != "" {
			m.Header.Set(natsserver.ClientInfoHdr, info)
		}
		return m
	}
	stored := func(m *nats.Msg) nats.Header { // as JetStream keeps it
		h := nats.Header{}
		for k, v := range m.Header {
			if k != natsserver.ClientInfoHdr {
				h[k] = v
			}
		}
		return h
	}
	now := time.Now()
	a := msg("$KV.fp_default.o.eA", "rec", header(RoleNodeOwner, "node-a"))
	b := msg("$KV.fp_default.o.eA", "rec", header(RoleOwner, ""))
	op := msg("$KV.fp_default.s.eA.k", "v", "")
	for _, m := range []*nats.Msg{a, b, op} {
		ws.seen(m)
	}

	w, ok := ws.writerOf(a.Subject, stored(a), a.Data, now)
	require.True(t, ok)
	require.True(t, w.bound)
	require.Equal(t, "node-a", w.node, "the node of the first write of those bytes")
	w, ok = ws.writerOf(b.Subject, stored(b), b.Data, now)
	require.True(t, ok)
	require.False(t, w.bound, "the role-wide owner: bound to no node")
	require.NotEmpty(t, w.user)
	w, ok = ws.writerOf(op.Subject, stored(op), op.Data, now)
	require.True(t, ok)
	require.Empty(t, w.user, "the store account's")

	other := msg("$KV.fp_default.o.eA", "rec", "")
	other.Header.Set("Nats-Expected-Last-Subject-Sequence", "8")
	start := time.Now()
	_, ok = ws.writerOf(other.Subject, stored(other), other.Data, now)
	require.False(t, ok, "another fence: not a write seen")
	require.GreaterOrEqual(t, time.Since(start), writerWait, "waited for it")
	start = time.Now()
	_, ok = ws.writerOf(a.Subject, stored(a), a.Data, ws.since.Add(-time.Millisecond))
	require.False(t, ok)
	require.Less(t, time.Since(start), writerWait, "stored before the subscription: not waited for")
	require.Zero(t, ws.n, "every write seen was met")
}
