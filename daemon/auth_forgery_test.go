package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/daemon"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/server/servertest"
	"github.com/fencepost/fencepost/testkit/testutil"
)

// The forgeries subject permissions cannot refuse an owner (docs/security.md,
// "The attacks the roles were built against"):
// writes of keys every owner needs (o.*, l.*, c.*, fp.<w>.dl.*), with
// contents no honest owner writes, against a real fencepostd --auth. Each
// test is a row of docs/security.md's trust model: what fencepostd
// detects and undoes, and what stays admitted.

// forgeries is the count of kind the auditor reported.
func forgeries(kind string) string {
	return fmt.Sprintf(`fencepost_forgeries_total{kind=%q,world="default"}`, kind)
}

// theft sets up a victim id held by node-b, claimed three times (epoch 3),
// and mallory, an owner bound to node-a.
type theft struct {
	a        *authed
	holder   *roleConn // node-b
	mallory  *roleConn // node-a
	op       *roleConn
	malKV    jetstream.KeyValue
	opKV     jetstream.KeyValue
	epoch    uint64 // the victim's, held by node-b
	ctx      context.Context
	victimID string
}

// countingHolder renews the victim id's lease as node-b, and returns
// commit: one post to the id, drained by node-b with a handler that counts
// it in the state key (key: wire.StateKey(th.victimID, "count")), then the
// stored count checked against want.
func (th *theft) countingHolder(t *testing.T, key string) (commit func(want string)) {
	ctx := th.ctx
	l, err := th.holder.w.Ownership.Renew(ctx, th.victimID, "node-b", time.Minute)
	require.NoError(t, err)
	count := drain.StateHandler(func(_ context.Context, _ drain.Message, st *drain.State) error {
		n := 0
		if v, ok := st.Get("count"); ok {
			n, _ = strconv.Atoi(string(v))
		}
		return st.Put("count", []byte(strconv.Itoa(n+1)))
	}).Handler()
	return func(want string) {
		t.Helper()
		_, err := th.holder.w.Send(ctx, th.victimID, []byte("+1"))
		require.NoError(t, err)
		res, err := th.holder.w.Drainer.DrainLease(ctx, l, count, drain.WithState())
		require.NoError(t, err)
		require.Equal(t, 1, res.Acked)
		e, err := th.opKV.Get(ctx, key)
		require.NoError(t, err)
		require.Equal(t, want, string(e.Value()))
	}
}

// waitStored waits until key's stored value is want.
func (th *theft) waitStored(t *testing.T, key, want string) {
	t.Helper()
	servertest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		e, err := th.opKV.Get(th.ctx, key)
		if err != nil {
			return err
		}
		if string(e.Value()) != want {
			return fmt.Errorf("%s is %s, want %s", key, e.Value(), want)
		}
		return nil
	})
}

func setupTheft(t *testing.T) *theft {
	t.Helper()
	a := startAuthed(t)
	th := &theft{a: a, ctx: testutil.Ctx(t, 30*time.Second), victimID: "victim"}
	th.holder = a.asFile(t, a.node(t, "node-b").File)
	th.mallory = a.asFile(t, a.node(t, "node-a").File)
	th.op = a.as(t, daemon.RoleOperator)
	th.malKV, th.opKV = th.mallory.bucket(t), th.op.bucket(t)
	own := th.holder.w.Ownership
	for i := range 3 {
		l, err := own.Claim(th.ctx, th.victimID, "node-b", time.Minute)
		require.NoError(t, err)
		th.epoch = l.Epoch
		if i < 2 {
			require.NoError(t, own.Release(th.ctx, th.victimID, "node-b"))
		}
	}
	require.Equal(t, uint64(3), th.epoch)
	return th
}

// record encodes an ownership record of mallory's.
func record(t *testing.T, epoch uint64, expires time.Time) []byte {
	t.Helper()
	b, err := wire.EncodeRecord(wire.Record{Node: "mallory", Epoch: epoch, State: wire.StateHeld, TTLms: 1000, Acquired: time.Now(), Expires: expires})
	require.NoError(t, err)
	return b
}

var in2027 = time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)

// waitFreed polls until the victim's record is free at epoch at least
// min and returns its status.
func (th *theft) waitFreed(t *testing.T, min uint64) {
	t.Helper()
	servertest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		st, err := th.op.w.Ownership.Owner(th.ctx, th.victimID)
		if err != nil {
			return err
		}
		if st.Held || st.Epoch < min {
			return fmt.Errorf("victim: held=%v by %s at epoch %d until %v", st.Held, st.Node, st.Epoch, st.Expires)
		}
		return nil
	})
}

// TestAttack_ForgedRecordUndone: an owner's record o.<id> written without
// the revision condition, its epoch set back and its expiry in 2027 (the
// issue's row), and one written at the next epoch with a compare-and-swap
// but a term far above the world's max_ttl, are stored: the server checks
// the subject, not the payload. fencepostd detects both in the bucket
// stream, counts them and frees the record at the highest epoch the id
// had, so that the forger's epoch answers fenced, nobody holds the id
// until 2027, and the next claim gets an epoch above every earlier one.
func TestAttack_ForgedRecordUndone(t *testing.T) {
	th := setupTheft(t)
	key := wire.RecordKey(th.victimID)

	t.Run("epoch back, no revision condition", func(t *testing.T) {
		_, err := th.malKV.Put(th.ctx, key, record(t, 1, in2027))
		require.NoError(t, err, "admitted by the server")
		th.waitFreed(t, 3)
		th.a.waitMetric(t, forgeries(daemon.ForgedEpochBack), 1)
		_, err = th.op.w.Ownership.Guard(th.ctx, th.victimID, "mallory", 1)
		require.ErrorIs(t, err, ownership.ErrFree, "the forged epoch is not the owner")
		// Freed at 3, the highest epoch, or above it when the auditor
		// cannot rule out an unseen claim between its mark and the
		// forgery: its own mark's write (h.<eid>, sent without waiting)
		// may land in between (freeAt).
		st, err := th.op.w.Ownership.Owner(th.ctx, th.victimID)
		require.NoError(t, err)
		l, err := th.holder.w.Ownership.Claim(th.ctx, th.victimID, "node-b", time.Minute)
		require.NoError(t, err)
		require.Greater(t, l.Epoch, uint64(3), "epochs went on from the highest")
		require.Equal(t, st.Epoch+1, l.Epoch, "the next claim is the freed record's epoch plus one")
	})

	t.Run("term above max_ttl", func(t *testing.T) {
		st, err := th.op.w.Ownership.Owner(th.ctx, th.victimID)
		require.NoError(t, err)
		_, err = th.malKV.Update(th.ctx, key, record(t, st.Epoch+1, in2027), st.Revision)
		require.NoError(t, err, "admitted by the server: a seize's write")
		th.waitFreed(t, st.Epoch+1)
		th.a.waitMetric(t, forgeries(daemon.ForgedRecordTerm), 1)
		l, err := th.holder.w.Ownership.Claim(th.ctx, th.victimID, "node-b", time.Minute)
		require.NoError(t, err, "claimable at once, not in 2027")
		require.Equal(t, st.Epoch+2, l.Epoch)
	})
	th.a.waitMetric(t, forgeries(daemon.ForgedEpochBack), 1)
}

// TestAttack_PlantedDrainLockRemoved: a drain lock l.<id> planted by an
// owner with the holder's epoch and an expiry in 2027 (which made every
// drain of the holder answer contended until 2027) is stored; fencepostd
// deletes it and counts it, and the holder drains.
func TestAttack_PlantedDrainLockRemoved(t *testing.T) {
	th := setupTheft(t)
	_, err := th.holder.w.Send(th.ctx, th.victimID, []byte("mail"))
	require.NoError(t, err)
	lock, err := wire.EncodeLock(wire.Lock{Token: "planted", Node: "node-b", Epoch: th.epoch, Expires: in2027})
	require.NoError(t, err)
	_, err = th.malKV.Put(th.ctx, wire.LockKey(th.victimID), lock)
	require.NoError(t, err, "admitted by the server")
	th.a.waitMetric(t, forgeries(daemon.ForgedLockTerm), 1)
	l, err := th.holder.w.Ownership.Renew(th.ctx, th.victimID, "node-b", time.Minute)
	require.NoError(t, err)
	var got []string
	servertest.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		res, err := th.holder.w.Drainer.DrainLease(th.ctx, l, func(_ context.Context, m drain.Message) error {
			got = append(got, string(m.Body))
			return nil
		})
		if err != nil {
			return err
		}
		if res.Acked != 1 {
			return fmt.Errorf("drained %d", res.Acked)
		}
		return nil
	})
	require.Equal(t, []string{"mail"}, got)
}

// TestAttack_LockOfAnotherNodeRemoved: node-a's owner plants the drain
// lock of an id node-b holds, with a term just under max_ttl (so no check
// of its value alone finds it), once naming node-b and once itself. The
// auditor knows the writer: it deletes each (lock_node), and node-b's
// drain goes through at once instead of answering contended for an hour.
func TestAttack_LockOfAnotherNodeRemoved(t *testing.T) {
	th := setupTheft(t)
	_, err := th.holder.w.Send(th.ctx, th.victimID, []byte("mail"))
	require.NoError(t, err)
	for i, node := range []string{"node-b", "node-a"} {
		lock, err := wire.EncodeLock(wire.Lock{Token: "planted", Node: node, Epoch: th.epoch, Expires: time.Now().Add(59 * time.Minute)})
		require.NoError(t, err)
		_, err = th.malKV.Put(th.ctx, wire.LockKey(th.victimID), lock)
		require.NoError(t, err, "admitted by the server")
		th.a.waitMetric(t, forgeries(daemon.ForgedLockNode), float64(i+1))
		servertest.CheckFor(t, 5*time.Second, 20*time.Millisecond, func() error {
			if _, err := th.opKV.Get(th.ctx, wire.LockKey(th.victimID)); !errors.Is(err, jetstream.ErrKeyNotFound) {
				return fmt.Errorf("the planted lock is still there: %v", err)
			}
			return nil
		})
	}
	require.LessOrEqual(t, th.a.metric(t, forgeries(daemon.ForgedLockTerm)), 0.0, "under max_ttl: only its writer gives it away")
	l, err := th.holder.w.Ownership.Renew(th.ctx, th.victimID, "node-b", time.Minute)
	require.NoError(t, err)
	res, err := th.holder.w.Drainer.DrainLease(th.ctx, l, func(context.Context, drain.Message) error { return nil })
	require.NoError(t, err, "not contended")
	require.Equal(t, 1, res.Acked)
}

// TestAttack_ConsumerAtRestRemoved: an owner's durable consumer without
// an inactivity threshold on another id's mailbox (which would be kept at
// rest, reading every message as it comes), and one whose threshold is a
// year, are refused at their creation by fencepostd's consumer gate, as
// JetStream errors, and counted; nothing is created. One made otherwise
// (the operator's) is removed by fencepostd at its creation, and counted.
func TestAttack_ConsumerAtRestRemoved(t *testing.T) {
	th := setupTheft(t)
	for who, js := range map[string]jetstream.JetStream{"mallory": th.mallory.c.JetStream(), "operator": th.op.c.JetStream()} {
		for name, threshold := range map[string]time.Duration{"spy": 0, "patient-spy": 365 * 24 * time.Hour} {
			_, err := js.CreateOrUpdateConsumer(th.ctx, wire.MailboxStream("default"), jetstream.ConsumerConfig{
				Durable: name, FilterSubject: wire.MailboxSubject("default", th.victimID), AckPolicy: jetstream.AckNonePolicy,
				InactiveThreshold: threshold, MemoryStorage: true,
			})
			if who == "mallory" {
				var apiErr *jetstream.APIError
				require.ErrorAs(t, err, &apiErr, "refused by the gate")
				require.Contains(t, apiErr.Description, "durable")
				_, err = th.op.c.JetStream().Consumer(th.ctx, wire.MailboxStream("default"), name)
				require.ErrorIs(t, err, jetstream.ErrConsumerNotFound, "nothing created")
				continue
			}
			require.NoError(t, err, "the operator's")
			servertest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
				_, err := th.op.c.JetStream().Consumer(th.ctx, wire.MailboxStream("default"), name)
				if err == nil {
					return fmt.Errorf("consumer %s still there", name)
				}
				return nil
			})
		}
	}
	th.a.waitMetric(t, `fencepost_consumers_refused_total{reason="durable",world="default"}`, 2)
	th.a.waitMetric(t, forgeries(daemon.ForgedConsumer), 2)
}

// TestAttack_OwnerForgeriesAdmitted: what an owner can still do to an id
// it does not hold, because the write looks like an honest one and the
// stored message does not say who published it. Each is stored, and
// fencepostd undoes nothing:
//   - a release as the holder's node (a conditional write of the record
//     at its revision, free): the holder is fenced (its next drain
//     refuses), the id is free for anyone; fencepostd counts it by its
//     writer (record_node, TestAttack_RecordPinnedToAnotherNode), but the
//     holder's fence is gone already;
//   - a cursor c.<id> moved to the mailbox's last sequence with
//     owner.creds, the role's credentials bound to no node: the messages
//     below it count as delivered and are skipped (a cursor above the
//     last sequence is refused by the purger: TestPurger_ForgedCursor;
//     one written by another node's owner is put back:
//     TestAttack_CursorOfAnotherNodeRestored);
//   - a dead letter fp.<w>.dl.<id> of an id it does not hold: stored and
//     listed.
func TestAttack_OwnerForgeriesAdmitted(t *testing.T) {
	th := setupTheft(t)
	for _, body := range []string{"one", "two"} {
		_, err := th.holder.w.Send(th.ctx, th.victimID, []byte(body))
		require.NoError(t, err)
	}
	held, err := th.holder.w.Ownership.Renew(th.ctx, th.victimID, "node-b", time.Minute)
	require.NoError(t, err)

	t.Run("cursor within the mailbox, with owner.creds", func(t *testing.T) {
		mb, err := th.op.c.JetStream().Stream(th.ctx, wire.MailboxStream("default"))
		require.NoError(t, err)
		info, err := mb.Info(th.ctx)
		require.NoError(t, err)
		c, err := wire.EncodeCursor(wire.Cursor{Seq: info.State.LastSeq})
		require.NoError(t, err)
		_, err = th.a.as(t, daemon.RoleOwner).bucket(t).Put(th.ctx, wire.CursorKey(th.victimID), c)
		require.NoError(t, err, "admitted by the server")
		res, err := th.holder.w.Drainer.DrainLease(th.ctx, held, func(_ context.Context, m drain.Message) error {
			return fmt.Errorf("delivered %s", m.Body)
		})
		require.NoError(t, err)
		require.Zero(t, res.Acked, "admitted: the two messages were skipped")
	})

	t.Run("dead letter of an id it does not hold", func(t *testing.T) {
		ack, err := th.mallory.c.JetStream().Publish(th.ctx, wire.DeadLetterSubject("default", th.victimID), []byte("forged"))
		require.NoError(t, err, "admitted by the server")
		require.NotZero(t, ack.Sequence)
	})

	t.Run("release as the holder's node", func(t *testing.T) {
		require.NoError(t, th.mallory.w.Ownership.Release(th.ctx, th.victimID, "node-b"), "admitted: node-a writes the record as node-b")
		_, err := th.op.w.Ownership.Guard(th.ctx, th.victimID, "node-b", held.Epoch)
		require.ErrorIs(t, err, ownership.ErrFree, "the holder is fenced")
		_, err = th.holder.w.Drainer.DrainLease(th.ctx, held, func(context.Context, drain.Message) error { return nil })
		require.Error(t, err, "its drain refuses")
	})
	for _, kind := range []string{daemon.ForgedEpochBack, daemon.ForgedRecordTerm, daemon.ForgedLockTerm, daemon.ForgedCursorNode} {
		require.LessOrEqual(t, th.a.metric(t, forgeries(kind)), 0.0, "nothing detected: %s", kind)
	}
	require.False(t, strings.Contains(th.mallory.violations(0), "Permissions Violation"), "nothing refused: %s", th.mallory.violations(0))
}

// TestAttack_ProducerWildcardPostMovedAside: a producer's post to a
// literal "*" mailbox token (fp.<w>.mb.*, which its permission matches as
// a subject) is stored, and no id's drain could read it; fencepostd's
// sweep moves it to the world's unroutable dead letters, with its body.
func TestAttack_ProducerWildcardPostMovedAside(t *testing.T) {
	a := startAuthed(t)
	ctx := testutil.Ctx(t, 40*time.Second)
	eve := a.spy(t, daemon.RoleProducer)
	m, err := eve.nc.RequestWithContext(ctx, "fp.default.mb.*", []byte("nobody drains me"))
	require.NoError(t, err)
	require.Contains(t, string(m.Data), `"seq"`, "admitted by the server: stored")
	op := a.as(t, daemon.RoleOperator)
	mb, err := op.c.JetStream().Stream(ctx, wire.MailboxStream("default"))
	require.NoError(t, err)
	// Moved aside: copied to the unroutable dead letters, then removed
	// (in that order: wait for both).
	servertest.CheckFor(t, 30*time.Second, 100*time.Millisecond, func() error {
		dls, err := op.w.Mailboxes.Unroutable(ctx, 10)
		if err != nil {
			return err
		}
		if len(dls) != 1 || string(dls[0].Body) != "nobody drains me" {
			return fmt.Errorf("unroutable: %d", len(dls))
		}
		info, err := mb.Info(ctx, jetstream.WithSubjectFilter("fp.default.mb.*"))
		if err != nil {
			return err
		}
		if n := info.State.Subjects["fp.default.mb.*"]; n != 0 {
			return fmt.Errorf("still stored on fp.default.mb.*: %d", n)
		}
		return nil
	})
}

// TestAttack_ForgedCursorsPurgeNothing: an owner's one publish of
// {"v":1,"seq":1000000} to the literal key c.* (which once made fencepostd
// purge every mailbox of the world, again after each restart), and the
// same value written to the id's cursor c.<id> with the holder's own
// credentials (a cursor of another node's id is the auditor's:
// TestAttack_CursorOfAnotherNodeRestored), are stored: owners write
// cursors. fencepostd's purger refuses both, counts them and purges
// nothing, also after a restart; the holder still drains its mail.
func TestAttack_ForgedCursorsPurgeNothing(t *testing.T) {
	th := setupTheft(t)
	for _, id := range []string{th.victimID, "bystander"} {
		_, err := th.holder.w.Send(th.ctx, id, []byte("mail of "+id))
		require.NoError(t, err)
	}
	forged := []byte(`{"v":1,"seq":1000000}`)
	_, err := th.mallory.c.JetStream().Publish(th.ctx, wire.KeySubject("default", wire.CursorPrefix+"*"), forged)
	require.NoError(t, err, "admitted by the server: the permission c.> matches the literal key")
	_, err = th.holder.bucket(t).Put(th.ctx, wire.CursorKey(th.victimID), forged)
	require.NoError(t, err, "admitted by the server")
	th.a.waitMetric(t, `fencepost_purger_bad_cursor_keys_total{world="default"}`, 1)
	th.a.waitMetric(t, `fencepost_purger_forged_cursors_total{world="default"}`, 1)
	depth := func() uint64 {
		mb, err := th.op.c.JetStream().Stream(th.ctx, wire.MailboxStream("default"))
		require.NoError(t, err)
		info, err := mb.Info(th.ctx)
		require.NoError(t, err)
		return info.State.Msgs
	}
	require.EqualValues(t, 2, depth(), "nothing purged")

	th.a.shutdown(t)
	again := startDaemon(t, th.a.dir, "--auth")
	again.waitReady(t)
	op := (&authed{started: again, dir: th.a.dir}).as(t, daemon.RoleOperator)
	servertest.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		if again.metric(t, `fencepost_purger_bad_cursor_keys_total{world="default"}`) < 1 {
			return fmt.Errorf("the purger has not judged c.* again yet")
		}
		return nil
	})
	mb, err := op.c.JetStream().Stream(th.ctx, wire.MailboxStream("default"))
	require.NoError(t, err)
	info, err := mb.Info(th.ctx)
	require.NoError(t, err)
	require.EqualValues(t, 2, info.State.Msgs, "nothing purged after the restart")
	holder := (&authed{started: again, dir: th.a.dir}).asFile(t, daemon.NodeCredsFile(th.a.dir, "node-b"))
	l, err := holder.w.Ownership.Renew(th.ctx, th.victimID, "node-b", time.Minute)
	require.NoError(t, err)
	var got []string
	res, err := holder.w.Drainer.DrainLease(th.ctx, l, func(_ context.Context, m drain.Message) error {
		got = append(got, string(m.Body))
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, 1, res.Acked)
	require.Equal(t, []string{"mail of victim"}, got, "the holder drains its mail")
}

// TestAttack_OverlongNodeLeaseRetired: an owner bound to node-a may write
// its own node lease as it likes, so it can give it an expiry in 2027,
// and with it every id it holds. Readers take a term above the world's
// max_ttl for lapsed (ownership's overlong), and fencepostd's retirer
// retires such a lease at once, counts it and logs it: node-a's id is
// claimable by node-b at once, not in 2027.
func TestAttack_OverlongNodeLeaseRetired(t *testing.T) {
	th := setupTheft(t)
	ctx := th.ctx
	ss, err := th.mallory.w.Ownership.OpenSession(ctx, "node-a", time.Minute)
	require.NoError(t, err)
	defer ss.Close()
	_, err = ss.Claim(ctx, "mine")
	require.NoError(t, err)
	rec, rev := nodeLease(t, th.opKV, "node-a")
	rec.Expires = in2027
	b, err := wire.EncodeRecord(rec)
	require.NoError(t, err)
	_, err = th.malKV.Update(ctx, wire.NodeKey("node-a"), b, rev)
	require.NoError(t, err, "its own lease: admitted by the server")
	th.a.waitMetric(t, forgeries(daemon.ForgedNodeTerm), 1)
	servertest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if rec, _ := nodeLease(t, th.opKV, "node-a"); rec.State != wire.StateFree {
			return fmt.Errorf("node-a's lease is %s until %v", rec.State, rec.Expires)
		}
		return nil
	})
	l, err := th.holder.w.Ownership.Claim(ctx, "mine", "node-b", time.Minute)
	require.NoError(t, err, "claimable at once, not in 2027")
	require.Equal(t, "node-b", l.Node)
}

// TestAttack_CursorOfAnotherNodeRestored: node-a's owner writes the cursor
// of an id node-b holds, within the mailbox (at its last message), which
// no check of the value alone can tell from a commit of node-b's. The
// auditor knows its writer: it counts it, puts back node-b's last cursor,
// and fencepostd's purger removes nothing below the forged one. node-b
// then drains every message it had not committed: none is lost.
func TestAttack_CursorOfAnotherNodeRestored(t *testing.T) {
	th := setupTheft(t)
	subj := wire.MailboxSubject("default", th.victimID)
	var want []string
	for i := range 5 {
		body := fmt.Sprint("mail ", i)
		_, err := th.holder.w.Send(th.ctx, th.victimID, []byte(body))
		require.NoError(t, err)
		want = append(want, body)
	}
	l, err := th.holder.w.Ownership.Renew(th.ctx, th.victimID, "node-b", time.Minute)
	require.NoError(t, err)
	var got []string
	handle := func(_ context.Context, m drain.Message) error {
		got = append(got, string(m.Body))
		return nil
	}
	_, err = th.holder.w.Drainer.DrainLease(th.ctx, l, handle, drain.WithMax(2))
	require.NoError(t, err)
	stored := func() uint64 {
		mb, err := th.op.c.JetStream().Stream(th.ctx, wire.MailboxStream("default"))
		require.NoError(t, err)
		info, err := mb.Info(th.ctx, jetstream.WithSubjectFilter(subj))
		require.NoError(t, err)
		return info.State.Subjects[subj]
	}
	servertest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if n := stored(); n != 3 {
			return fmt.Errorf("stored %d, want 3 (2 committed and purged by fencepostd)", n)
		}
		return nil
	})
	genuine, err := th.opKV.Get(th.ctx, wire.CursorKey(th.victimID))
	require.NoError(t, err)

	mb, err := th.op.c.JetStream().Stream(th.ctx, wire.MailboxStream("default"))
	require.NoError(t, err)
	info, err := mb.Info(th.ctx)
	require.NoError(t, err)
	forged := []byte(`{"v":1,"seq":` + strconv.FormatUint(info.State.LastSeq, 10) + `}`)
	_, err = th.malKV.Put(th.ctx, wire.CursorKey(th.victimID), forged)
	require.NoError(t, err, "admitted by the server: owners write cursors")
	th.a.waitMetric(t, `fencepost_forgeries_total{kind="cursor_node",world="default"}`, 1)
	servertest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		e, err := th.opKV.Get(th.ctx, wire.CursorKey(th.victimID))
		if err != nil {
			return err
		}
		if string(e.Value()) != string(genuine.Value()) {
			return fmt.Errorf("cursor %s, want node-b's %s back", e.Value(), genuine.Value())
		}
		return nil
	})
	require.EqualValues(t, 3, stored(), "nothing purged below the forged cursor")

	_, err = th.holder.w.Drainer.DrainLease(th.ctx, l, handle)
	require.NoError(t, err)
	require.Equal(t, want, got, "every message delivered once")
}
