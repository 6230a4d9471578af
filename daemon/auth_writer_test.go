package daemon_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/daemon"
	"github.com/fencepost/fencepost/fencing"
	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/server/servertest"
	"github.com/fencepost/fencepost/testkit/testutil"
)

// Who wrote a key (docs/security.md, "Who wrote it"): the server puts the
// requester's identity (Nats-Request-Info) on a message that crosses a
// service import, and the owners' imports of record and state writes
// share it; JetStream strips the header before it stores the message, so
// fencepostd reads it in flight, in the store account, where it also
// reaches fencepostd's subscription.

// TestAuth_WriterIdentityInFlightNotStored: node-a publishes a record
// with a Nats-Request-Info of its own making (naming node-b's user). In
// the store account the write carries the server's header instead, naming
// node-a's user and its JWT; the stored message carries none (what the
// server keeps of a write says nothing of its writer).
func TestAuth_WriterIdentityInFlightNotStored(t *testing.T) {
	a := startAuthed(t)
	ctx := testutil.Ctx(t, 20*time.Second)
	nodeA, nodeB := a.node(t, "node-a"), a.node(t, "node-b")
	store := a.accountSpy(t, "account.nk")
	subject := wire.KeySubject("default", wire.RecordKey("pinned"))
	store.listen(t, subject)
	require.NoError(t, store.nc.Flush())

	credsA, err := daemon.ReadCreds(nodeA.File)
	require.NoError(t, err)
	userA, err := credsA.User()
	require.NoError(t, err)
	credsB, err := daemon.ReadCreds(nodeB.File)
	require.NoError(t, err)
	userB, err := credsB.User()
	require.NoError(t, err)
	nc, err := nats.Connect(a.d.ClientURL(), credsA.NATSOption())
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)

	rec, err := wire.EncodeRecord(wire.Record{Node: "node-a", Epoch: 1, State: wire.StateHeld, TTLms: 60_000, Acquired: time.Now(), Expires: time.Now().Add(time.Minute)})
	require.NoError(t, err)
	forged, err := json.Marshal(natsserver.ClientInfo{Account: "FENCEPOST_OWNERS", User: userB, Name: "fp-owner@node-b"})
	require.NoError(t, err)
	m := nats.NewMsg(subject)
	m.Data = rec
	m.Header.Set(natsserver.ClientInfoHdr, string(forged))
	ack, err := js.PublishMsg(ctx, m)
	require.NoError(t, err, "stored: an owner writes records")

	var seen *nats.Msg
	servertest.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		if got := store.got(t); len(got) > 0 {
			seen = got[0]
			return nil
		}
		return fmt.Errorf("the write did not reach the store account's subscriber")
	})
	var ci natsserver.ClientInfo
	require.NoError(t, json.Unmarshal([]byte(seen.Header.Get(natsserver.ClientInfoHdr)), &ci), "the server's header: %v", seen.Header)
	require.Len(t, seen.Header.Values(natsserver.ClientInfoHdr), 1, "one header, the server's")
	require.Equal(t, userA, ci.User, "the requester's user, not the forged one")
	require.NotEmpty(t, ci.Jwt, "the requester's JWT (the import shares it)")

	bucket, err := a.as(t, daemon.RoleOperator).c.JetStream().Stream(ctx, wire.BucketStream("default"))
	require.NoError(t, err)
	raw, err := bucket.GetMsg(ctx, ack.Sequence)
	require.NoError(t, err)
	require.Empty(t, raw.Header.Get(natsserver.ClientInfoHdr), "JetStream stores no writer")
	require.Equal(t, rec, raw.Data)
}

// TestAttack_RecordPinnedToAnotherNode: node-a writes the record of a
// free id naming node-b and node-b's lease epoch, held (issue 47: the id
// looks held by node-b's session, which never serves it, for as long as
// node-b runs). Its content is what node-b's claim would write, so only
// its writer tells it: fencepostd frees it, counts and logs it, and
// node-b claims the id at a later epoch. A release of node-b's id by
// node-a (a free record naming node-b) is counted likewise.
func TestAttack_RecordPinnedToAnotherNode(t *testing.T) {
	th := setupTheft(t)
	ctx := th.ctx
	ss, err := th.holder.w.Ownership.OpenSession(ctx, "node-b", time.Minute)
	require.NoError(t, err)
	defer ss.Close()
	lease, _ := nodeLease(t, th.opKV, "node-b")
	pinned := "pinned"
	b, err := wire.EncodeRecord(wire.Record{Node: "node-b", Epoch: 1, State: wire.StateHeld, TTLms: 60_000, Acquired: time.Now(), Expires: time.Now().Add(time.Minute), NodeLease: lease.Epoch})
	require.NoError(t, err)
	_, err = th.malKV.Create(ctx, wire.RecordKey(pinned), b)
	require.NoError(t, err, "stored: an owner writes records")
	th.a.waitMetric(t, forgeries(daemon.ForgedRecordNode), 1)
	servertest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		st, err := th.op.w.Ownership.Owner(ctx, pinned)
		if err != nil {
			return err
		}
		if st.Held {
			return fmt.Errorf("pinned: held by %s at epoch %d", st.Node, st.Epoch)
		}
		return nil
	})
	l, err := ss.Claim(ctx, pinned)
	require.NoError(t, err, "node-b claims it")
	require.Greater(t, l.Epoch, uint64(1), "above the forged epoch")

	require.NoError(t, th.mallory.w.Ownership.Release(ctx, th.victimID, "node-b"), "stored: node-a writes node-b's record free")
	th.a.waitMetric(t, forgeries(daemon.ForgedRecordNode), 2)
	require.LessOrEqual(t, th.a.metric(t, forgeries(daemon.ForgedEpochBack)), 0.0)
	l, err = ss.Claim(ctx, th.victimID)
	require.NoError(t, err, "node-b claims its id again")
	require.NoError(t, ss.Release(ctx, th.victimID))
	l, err = th.op.w.Ownership.Claim(ctx, th.victimID, "node-b", time.Minute)
	require.NoError(t, err, "the operator may write a record naming any node")
	th.a.waitMarked(t, th.victimID, l.Epoch) // the auditor judged every write before it
	require.Equal(t, 2.0, th.a.metric(t, forgeries(daemon.ForgedRecordNode)), "node-b's and the operator's own writes are not counted")
}

// TestAttack_StateInAFencedBatchOfAnotherNode: node-a writes a state key
// of the id node-b holds as node-b's commit does, in an atomic batch
// fenced on the id's record at its revision (the write docs/security.md
// admitted: it could not be told from the holder's). fencepostd tells it
// by its writer, puts back the value node-b committed, counts and logs
// it; node-b's next commit builds on its own value.
func TestAttack_StateInAFencedBatchOfAnotherNode(t *testing.T) {
	th := setupTheft(t)
	ctx := th.ctx
	key := wire.StateKey(th.victimID, "count")
	commit := th.countingHolder(t, key)
	commit("1")

	st, err := th.op.w.Ownership.Owner(ctx, th.victimID)
	require.NoError(t, err)
	m := nats.NewMsg(wire.KeySubject("default", key))
	m.Data = []byte("1000000")
	m.Header.Set(fencing.HeaderExpectedSeq, fmt.Sprint(st.Revision))
	m.Header.Set(fencing.HeaderExpectedSubject, wire.KeySubject("default", wire.RecordKey(th.victimID)))
	_, err = jsapi.PublishBatch(ctx, th.mallory.c.JetStream(), []*nats.Msg{m})
	require.NoError(t, err, "stored: fenced at the holder's revision, as its commit is")
	th.a.waitMetric(t, forgeries(daemon.ForgedStateNode), 1)
	th.waitStored(t, key, "1") // put back
	commit("2")
	require.LessOrEqual(t, th.a.metric(t, forgeries(daemon.ForgedState)), 0.0, "fenced: not an unfenced write")
	// A claim at the next epoch after node-b's commits: once the auditor
	// marked it, it judged them.
	require.NoError(t, th.holder.w.Ownership.Release(ctx, th.victimID, "node-b"))
	l, err := th.holder.w.Ownership.Claim(ctx, th.victimID, "node-b", time.Minute)
	require.NoError(t, err)
	th.a.waitMarked(t, th.victimID, l.Epoch)
	require.Equal(t, 1.0, th.a.metric(t, forgeries(daemon.ForgedStateNode)), "node-b's own commits are not taken for another node's")
}
