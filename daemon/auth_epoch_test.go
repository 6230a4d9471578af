package daemon_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/daemon"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/server/servertest"
)

// TestAttack_EpochNeverGoesBack: no write a node owner can make gives an
// epoch twice or sets one back (the trust model: "a fencing token issued
// twice", "an id locked forever"). Against a real fencepostd --auth,
// node-a (mallory) writes the victim's record held by node-b: at a lower
// epoch without the revision condition and, right behind node-b's claim,
// with it, at epoch 2^64-1 and
// free (which no claim could ever go past), as a delete marker (the next
// claim would start at epoch 1), and as bytes that do not decode (the id
// would be stuck); then fencepostd restarts and the epoch is set back
// again. Each is detected (counted by kind) and freed at an epoch at
// least the highest honest one; every claim after it gets an epoch above
// every epoch claimed before. The settings entry (whose rewrite once made
// fencepostd forget the epochs) and the marks of the highest epochs
// (h.<eid>) are refused to it.
func TestAttack_EpochNeverGoesBack(t *testing.T) {
	th := setupTheft(t)
	ctx := th.ctx
	key := wire.RecordKey(th.victimID)
	highest := th.epoch  // the highest epoch any claim was given
	var claimedAt uint64 // the revision of the last claim's record
	claim := func(t *testing.T, what string) {
		t.Helper()
		var l uint64
		servertest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
			got, err := th.holder.w.Ownership.Claim(ctx, th.victimID, "node-b", time.Minute)
			if err != nil {
				return err
			}
			l, claimedAt = got.Epoch, got.Revision
			return nil
		})
		require.Greater(t, l, highest, "%s: the claim after it got epoch %d, not above every earlier one (%d)", what, l, highest)
		highest = l
	}
	forge := func(t *testing.T, what, kind string, n float64, write func() error) {
		t.Helper()
		require.NoError(t, write(), "%s: admitted by the server (an owner writes records)", what)
		th.a.waitMetric(t, forgeries(kind), n)
		th.waitFreed(t, highest)
		claim(t, what)
	}
	put := func(rec wire.Record) func() error {
		return func() error {
			b, err := wire.EncodeRecord(rec)
			if err != nil {
				return err
			}
			_, err = th.malKV.Put(ctx, key, b)
			return err
		}
	}
	held := func(epoch uint64) wire.Record {
		return wire.Record{Node: "node-a", Epoch: epoch, State: wire.StateHeld, TTLms: 60_000, Acquired: time.Now(), Expires: time.Now().Add(time.Minute)}
	}

	forge(t, "epoch back", daemon.ForgedEpochBack, 1, put(held(1)))
	// Right behind node-b's claim, at its revision: the claim's write is
	// then often gone from the bucket before fencepostd's watch delivers
	// it, and the epoch written (the one the last forgery was freed at)
	// is no step back from the last one fencepostd saw; but it had
	// ended, and no honest write holds it again (CI, 7 Dec).
	for i := range 5 {
		forge(t, "epoch back right behind a claim", daemon.ForgedEpochBack, float64(2+i), func() error {
			b, err := wire.EncodeRecord(held(highest - 1))
			if err != nil {
				return err
			}
			_, err = th.malKV.Update(ctx, key, b, claimedAt)
			return err
		})
	}
	forge(t, "epoch 2^64-1, free", daemon.ForgedEpochJump, 1, put(wire.Record{Epoch: math.MaxUint64, State: wire.StateFree}))
	forge(t, "delete marker", daemon.ForgedRecordGone, 1, func() error { return th.malKV.Delete(ctx, key) })
	forge(t, "bytes that do not decode", daemon.ForgedRecordBad, 1, func() error {
		_, err := th.malKV.Put(ctx, key, []byte("not a record"))
		return err
	})

	// What once made fencepostd forget the epochs, and its marks: refused.
	for _, k := range []string{wire.WorldKey, "h." + wire.EncodeID(th.victimID)} {
		subject := wire.KeySubject("default", k)
		th.mallory.refused(t, "write "+k, subject, func(ctx context.Context) error {
			_, err := th.mallory.c.JetStream().Publish(ctx, subject, []byte(`{"epoch":1,"rev":1}`))
			return err
		})
	}

	// A restart of fencepostd keeps the highest epochs.
	th.a.shutdown(t)
	again := startDaemon(t, th.a.dir, "--auth")
	again.waitReady(t)
	th.a.started = again
	th.holder = th.a.asFile(t, daemon.NodeCredsFile(th.a.dir, "node-b"))
	th.mallory = th.a.asFile(t, daemon.NodeCredsFile(th.a.dir, "node-a"))
	th.op = th.a.as(t, daemon.RoleOperator)
	th.malKV = th.mallory.bucket(t)
	forge(t, "epoch back after a restart", daemon.ForgedEpochBack, 1, put(held(1)))
	require.Empty(t, th.holder.violations(0))
}

// TestAuth_EpochMarksGoWithAReset: the marks of the highest
// epochs are the bucket's: a reset of the world (a purge of the bucket,
// the operator's) drops them with the records, and the epochs start
// again at 1 without a forgery reported.
func TestAuth_EpochMarksGoWithAReset(t *testing.T) {
	th := setupTheft(t)
	ctx := th.ctx
	require.NoError(t, th.op.c.ResetWorld(ctx, "default"))
	var l uint64
	servertest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		got, err := th.holder.w.Ownership.Claim(ctx, th.victimID, "node-b", time.Minute)
		if err != nil {
			return err
		}
		l = got.Epoch
		return nil
	})
	require.Equal(t, uint64(1), l, "a reset starts the epochs again")
	// The auditor follows the bucket after the reset: a write of the
	// record is judged against the new epochs, not the old ones.
	require.NoError(t, th.holder.w.Ownership.Release(ctx, th.victimID, "node-b"))
	l2, err := th.holder.w.Ownership.Claim(ctx, th.victimID, "node-b", time.Minute)
	require.NoError(t, err)
	require.Equal(t, uint64(2), l2.Epoch)
	_, err = th.op.c.JetStream().Publish(ctx, wire.KeySubject("default", wire.ForceKey("settle")), []byte("{}"), jetstream.WithExpectStream(wire.BucketStream("default")))
	require.NoError(t, err)
	for _, kind := range []string{daemon.ForgedEpochBack, daemon.ForgedEpochJump, daemon.ForgedRecordGone, daemon.ForgedRecordBad} {
		require.LessOrEqual(t, th.a.metric(t, forgeries(kind)), 0.0, "nothing forged: %s", kind)
	}
	st, err := th.op.w.Ownership.Owner(ctx, th.victimID)
	require.NoError(t, err)
	require.True(t, st.Held, fmt.Sprintf("%+v", st))
	_ = nats.ErrTimeout
}

// TestAttack_StateOfAHeldID: per-id state of an id node-b holds (issue
// 47: node-a published s.<eid>.count, and the holder's next commit built
// on the forged value, 1000000 -> 1000001). node-b commits count=1 with a
// message; node-a's raw write of 1000000 is stored (owners write state
// keys), and fencepostd, which sees it was written outside any fenced
// commit, puts back the value node-b committed, counts and logs it; node-b's
// next commit builds on its own 1 (2). node-a's `fencepost state --delete`
// (Mailboxes.DeleteState) is refused while the id is held: it claims the
// id first; the state stays.
func TestAttack_StateOfAHeldID(t *testing.T) {
	th := setupTheft(t)
	ctx := th.ctx
	key := wire.StateKey(th.victimID, "count")
	commit := th.countingHolder(t, key)
	commit("1")

	_, err := th.malKV.Put(ctx, key, []byte("1000000"))
	require.NoError(t, err, "stored: an owner writes state keys")
	th.a.waitMetric(t, forgeries(daemon.ForgedState), 1)
	th.waitStored(t, key, "1") // put back
	commit("2")

	_, err = th.mallory.w.Mailboxes.DeleteState(ctx, th.victimID, "node-a")
	require.Error(t, err, "refused: the id is held")
	e, err := th.opKV.Get(ctx, key)
	require.NoError(t, err)
	require.Equal(t, "2", string(e.Value()), "the state stays")
	st, err := th.op.w.Ownership.Owner(ctx, th.victimID)
	require.NoError(t, err)
	require.Equal(t, "node-b", st.Node)
}

// TestAttack_NodeLeaseEpochNeverGoesBack: a node owner may write its own
// node lease n.<node> as it likes; its epoch is the epoch of the node's
// sessions, and a session's epoch given twice would make the records of
// an ended session live again. node-a sets its lease's epoch back, and
// writes a delete marker on it (the next session would start at epoch 1):
// each is detected, counted and freed at or above the highest epoch, and
// the next session's epoch is above every earlier one.
func TestAttack_NodeLeaseEpochNeverGoesBack(t *testing.T) {
	th := setupTheft(t)
	ctx := th.ctx
	key := wire.NodeKey("node-a")
	var highest uint64
	session := func(t *testing.T, what string) {
		t.Helper()
		var epoch uint64
		servertest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
			ss, err := th.mallory.w.Ownership.OpenSession(ctx, "node-a", time.Minute)
			if err != nil {
				return err
			}
			defer ss.Close()
			rec, _ := nodeLease(t, th.opKV, "node-a")
			epoch = rec.Epoch
			return nil
		})
		require.Greater(t, epoch, highest, "%s: the session after it got epoch %d, not above every earlier one (%d)", what, epoch, highest)
		highest = epoch
	}
	session(t, "first")
	session(t, "second")
	forged := func(t *testing.T, what, kind string, write func() error) {
		t.Helper()
		require.NoError(t, write(), "%s: its own lease: admitted by the server", what)
		th.a.waitMetric(t, forgeries(kind), 1)
		servertest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
			if rec, _ := nodeLease(t, th.opKV, "node-a"); rec.State != wire.StateFree || rec.Epoch < highest {
				return fmt.Errorf("node-a's lease: %s at epoch %d", rec.State, rec.Epoch)
			}
			return nil
		})
		session(t, what)
	}
	forged(t, "epoch back", daemon.ForgedEpochBack, func() error {
		b, err := wire.EncodeRecord(wire.Record{Node: "node-a", Epoch: 1, State: wire.StateHeld, TTLms: 60_000, Acquired: time.Now(), Expires: time.Now().Add(time.Minute)})
		if err != nil {
			return err
		}
		_, err = th.malKV.Put(ctx, key, b)
		return err
	})
	forged(t, "delete marker", daemon.ForgedRecordGone, func() error { return th.malKV.Delete(ctx, key) })
}

// TestAuth_ClaimRightBehindAPurge: a reset purges the bucket before it
// writes the world's entry again, and a claim can land in between: the
// auditor sees a record whose epoch is below its mark before it learns of
// the reset. It must not take that honest claim for a forgery (it freed
// it above the old epochs, under load in CI). The window is made wide
// here: the operator purges the bucket, as a reset does first, and writes
// no world entry; the holder claims the id at epoch 1 and keeps it.
func TestAuth_ClaimRightBehindAPurge(t *testing.T) {
	th := setupTheft(t)
	ctx := th.ctx
	bucket, err := th.op.c.JetStream().Stream(ctx, wire.BucketStream("default"))
	require.NoError(t, err)
	require.NoError(t, bucket.Purge(ctx)) // what a reset does first
	l, err := th.holder.w.Ownership.Claim(ctx, th.victimID, "node-b", time.Minute)
	require.NoError(t, err)
	require.Equal(t, uint64(1), l.Epoch, "the record was purged: epochs start again")
	// The auditor has judged the claim once a later write was seen.
	_, err = th.op.c.JetStream().Publish(ctx, wire.KeySubject("default", wire.ForceKey("settle")), []byte("{}"), jetstream.WithExpectStream(wire.BucketStream("default")))
	require.NoError(t, err)
	servertest.CheckFor(t, 5*time.Second, 50*time.Millisecond, func() error {
		if n := th.a.metric(t, forgeries(daemon.ForgedEpochBack)); n > 0 {
			return fmt.Errorf("the honest claim was taken for a forgery")
		}
		st, err := th.op.w.Ownership.Owner(ctx, th.victimID)
		if err != nil {
			return err
		}
		if !st.Held || st.Epoch != 1 {
			return fmt.Errorf("the holder's claim was undone: %+v", st)
		}
		return nil
	})
	require.NoError(t, th.holder.w.Ownership.Release(ctx, th.victimID, "node-b"))
	require.LessOrEqual(t, th.a.metric(t, forgeries(daemon.ForgedEpochBack)), 0.0)
}
