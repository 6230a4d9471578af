package daemon_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/daemon"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/server/servertest"
)

// Writes the auditor's watch never delivers (docs/security.md, "Epochs"):
// the bucket keeps one message a key, so a write followed closely by
// another of the same key is gone before the watch reads it. fencepostd
// learns them from the bucket's republished record writes (the record
// feed) and judges them, in order, before the write the watch delivered.
// The tests make the watch skip writes (SetWatchMisses); the server does
// so on its own timing only.

// missedWrites is the series of the record writes the auditor's watch
// missed, known to the feed or not.
func missedWrites(known string) string {
	return fmt.Sprintf(`fencepost_auditor_missed_writes_total{known=%q,world="default"}`, known)
}

// missWrites makes the watches skip the writes of id's record that pick
// chooses by the record written (and its bytes).
func missWrites(t *testing.T, id string, pick func(r wire.Record, value []byte) bool) {
	t.Helper()
	key := wire.RecordKey(id)
	daemon.SetWatchMisses(t, func(k string, v []byte) bool {
		if k != key {
			return false
		}
		r, err := wire.DecodeRecord(v)
		return err == nil && pick(r, v)
	})
}

// waitMark waits until the auditor's mark of the victim (h.<eid>, which
// it writes when the epoch it judged rises) is at epoch.
func (th *theft) waitMark(t *testing.T, epoch uint64) {
	t.Helper()
	mark := "h." + strings.TrimPrefix(wire.RecordKey(th.victimID), wire.RecordPrefix)
	servertest.CheckFor(t, 15*time.Second, 20*time.Millisecond, func() error {
		e, err := th.opKV.Get(th.ctx, mark)
		if err != nil {
			return err
		}
		var m struct{ Epoch uint64 }
		if err := json.Unmarshal(e.Value(), &m); err != nil {
			return err
		}
		if m.Epoch != epoch {
			return fmt.Errorf("mark at epoch %d, want %d", m.Epoch, epoch)
		}
		return nil
	})
}

// heldBy is a held record of node at epoch, as a claim writes it.
func heldBy(t *testing.T, node string, epoch uint64) []byte {
	t.Helper()
	now := time.Now()
	b, err := wire.EncodeRecord(wire.Record{Node: node, Epoch: epoch, State: wire.StateHeld, TTLms: 60_000, Acquired: now, Expires: now.Add(time.Minute)})
	require.NoError(t, err)
	return b
}

// TestAttack_ClaimWrittenOverBeforeTheWatch: node-b claims the free victim
// at epoch 4, and node-a writes its own record at epoch 4 over the claim
// (a compare-and-swap at the claim's revision) before the watch delivers
// the claim. What the watch delivers looks like node-a's own claim of
// epoch 4, the epoch node-b was given: judged by content alone it passed,
// and epoch 4 had two holders. With the claim known from the feed,
// node-a's record is an ended epoch held again: freed above 4, so node-b's
// next claim gets 5 or more. With the renewal, node-a also writes over
// its own record at once, so that the watch misses the forgery as well:
// the forgery is judged from the feed (counted; gone, so nothing to undo)
// and the renewal, an epoch nobody holds honestly, is freed.
func TestAttack_ClaimWrittenOverBeforeTheWatch(t *testing.T) {
	for _, renew := range []bool{false, true} {
		t.Run(fmt.Sprintf("renewed=%v", renew), func(t *testing.T) {
			th := setupTheft(t)
			ctx, key, own := th.ctx, wire.RecordKey(th.victimID), th.holder.w.Ownership
			require.NoError(t, own.Release(ctx, th.victimID, "node-b"))
			misses, forged := 1, 1.0
			if renew {
				misses, forged = 2, 2
			}
			epoch := th.epoch + 1
			forgery := heldBy(t, "node-a", epoch)
			missWrites(t, th.victimID, func(r wire.Record, v []byte) bool {
				claimed := r.Node == "node-b" && r.Epoch == epoch && r.State == wire.StateHeld
				return claimed || renew && bytes.Equal(v, forgery)
			})

			claim, err := own.Claim(ctx, th.victimID, "node-b", time.Minute)
			require.NoError(t, err)
			require.Equal(t, epoch, claim.Epoch)
			e, err := th.malKV.Get(ctx, key)
			require.NoError(t, err)
			rev, err := th.malKV.Update(ctx, key, forgery, e.Revision())
			require.NoError(t, err, "stored: the server checks the subject and the revision, not who holds")
			if renew {
				_, err = th.malKV.Update(ctx, key, heldBy(t, "node-a", claim.Epoch), rev)
				require.NoError(t, err)
			}

			th.a.waitMetric(t, forgeries(daemon.ForgedEpochBack), forged)
			require.GreaterOrEqual(t, th.a.metric(t, missedWrites("true")), float64(misses), "judged from the feed")
			th.waitFreed(t, claim.Epoch)
			again, err := own.Claim(ctx, th.victimID, "node-b", time.Minute)
			require.NoError(t, err)
			require.Greater(t, again.Epoch, claim.Epoch, "epoch %d given once", claim.Epoch)
		})
	}
}

// TestAuth_MissedHonestWritesPass: a claim, a renewal and a release by
// node-b that the watch never delivers, then node-a's claim, which it
// does: judged in order from the feed, each is honest, and node-a keeps
// the victim at epoch 5.
func TestAuth_MissedHonestWritesPass(t *testing.T) {
	th := setupTheft(t)
	ctx, own := th.ctx, th.holder.w.Ownership
	require.NoError(t, own.Release(ctx, th.victimID, "node-b"))
	missWrites(t, th.victimID, func(r wire.Record, _ []byte) bool { return r.Node == "node-b" && r.Epoch == th.epoch+1 })
	claim, err := own.Claim(ctx, th.victimID, "node-b", time.Minute)
	require.NoError(t, err)
	_, err = own.Renew(ctx, th.victimID, "node-b", time.Minute)
	require.NoError(t, err)
	require.NoError(t, own.Release(ctx, th.victimID, "node-b"))
	mine, err := th.mallory.w.Ownership.Claim(ctx, th.victimID, "node-a", time.Minute)
	require.NoError(t, err)
	require.Equal(t, claim.Epoch+1, mine.Epoch)

	// The auditor's mark of the victim reaches epoch 5 once it judged
	// node-a's claim.
	th.waitMark(t, mine.Epoch)
	require.GreaterOrEqual(t, th.a.metric(t, missedWrites("true")), 3.0, "the claim, the renewal and the release, judged from the feed")
	require.LessOrEqual(t, th.a.metric(t, missedWrites("false")), 0.0, "none unknown")
	for _, kind := range []string{daemon.ForgedEpochBack, daemon.ForgedEpochJump, daemon.ForgedRecordNode, daemon.ForgedRecordTerm} {
		require.LessOrEqual(t, th.a.metric(t, forgeries(kind)), 0.0, "nothing detected: %s", kind)
	}
	st, err := th.op.w.Ownership.Owner(ctx, th.victimID)
	require.NoError(t, err)
	require.True(t, st.Held)
	require.Equal(t, "node-a", st.Node)
	require.Equal(t, mine.Epoch, st.Epoch)
}
