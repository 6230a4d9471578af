package daemon_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/daemon"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/world"
)

// TestAuth_WorldRemovedAndAddedAgain: the operator removes fencepostd's
// world and adds it again while fencepostd runs. The new world's epochs
// start at 1: node-b's first claim there (epoch 1) is honest, though the
// old world had the id at epoch 3. fencepostd's watches of the bucket
// went on on the new stream past the old one's last sequence, blind to
// the new world; they now start again on it, and the auditor judges the
// new bucket against nothing it kept of the old one (its marks, its
// record feed): the claim is honest, a claim written over before the
// watch delivered it is detected, and a node lease with a term past
// max_ttl is retired.
func TestAuth_WorldRemovedAndAddedAgain(t *testing.T) {
	th := setupTheft(t)
	ctx := th.ctx
	th.waitMark(t, th.epoch)
	// The old bucket's sequence well past what the new one reaches in
	// this test: a watch that went on past it would see nothing.
	for i := range 300 {
		_, err := th.opKV.Put(ctx, "filler", []byte(fmt.Sprint(i)))
		require.NoError(t, err)
	}

	require.NoError(t, th.op.c.RemoveWorld(ctx, "default"))
	_, err := th.op.c.CreateWorld(ctx, "default", world.Config{})
	require.NoError(t, err)
	l, err := th.holder.w.Ownership.Claim(ctx, th.victimID, "node-b", time.Minute)
	require.NoError(t, err)
	require.Equal(t, uint64(1), l.Epoch, "a new world's epochs start at 1")

	th.waitMark(t, 1)
	require.LessOrEqual(t, th.a.metric(t, forgeries(daemon.ForgedEpochBack)), 0.0, "the new world's first claim judged against the old world's epochs")
	st, err := th.op.w.Ownership.Owner(ctx, th.victimID)
	require.NoError(t, err)
	require.True(t, st.Held, "freed: %+v", st)
	require.Equal(t, "node-b", st.Node)

	// The record feed of the new bucket (TestAttack_ClaimWrittenOverBeforeTheWatch).
	missWrites(t, "twice", func(r wire.Record, _ []byte) bool { return r.Node == "node-b" && r.Epoch == 1 })
	claim, err := th.holder.w.Ownership.Claim(ctx, "twice", "node-b", time.Minute)
	require.NoError(t, err)
	e, err := th.malKV.Get(ctx, wire.RecordKey("twice"))
	require.NoError(t, err)
	_, err = th.malKV.Update(ctx, wire.RecordKey("twice"), heldBy(t, "node-a", claim.Epoch), e.Revision())
	require.NoError(t, err)
	th.a.waitMetric(t, forgeries(daemon.ForgedEpochBack), 1)

	// The retirer of the new bucket (TestAttack_OverlongNodeLeaseRetired).
	ss, err := th.mallory.w.Ownership.OpenSession(ctx, "node-a", time.Minute)
	require.NoError(t, err)
	defer ss.Close()
	rec, rev := nodeLease(t, th.opKV, "node-a")
	rec.Expires = in2027
	b, err := wire.EncodeRecord(rec)
	require.NoError(t, err)
	_, err = th.malKV.Update(ctx, wire.NodeKey("node-a"), b, rev)
	require.NoError(t, err)
	th.a.waitMetric(t, forgeries(daemon.ForgedNodeTerm), 1)
}
