package ownership_test

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/fencing"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

func TestSession_BacksIDs(t *testing.T) {
	suite(t, func(t *testing.T, env *testutil.Env, w *client.World) {
		ctx := testutil.Ctx(t, time.Minute)
		const ttl = 600 * time.Millisecond
		s := w.Ownership
		ss, err := s.OpenSession(ctx, "n1", ttl)
		require.NoError(t, err)
		defer ss.Orphan()
		ids := []string{"a", "b.c", "日本"}
		leases := map[string]*ownership.Lease{}
		for _, id := range ids {
			l, err := ss.Claim(ctx, id)
			require.NoError(t, err)
			require.Equal(t, "n1", l.Node)
			leases[id] = l
		}
		_, err = s.Claim(ctx, "a", "other", time.Minute)
		require.ErrorIs(t, err, ownership.ErrHeld)
		_, err = s.Renew(ctx, "a", "n1", time.Minute)
		require.ErrorIs(t, err, ownership.ErrBacked, "a backed id renews with its node lease")

		// Three node lease renewals later the ids are held, valid, and
		// their records were not written again.
		testutil.WaitFor(t, 5*time.Second, "3 renewals", func() bool { return ss.Renewals() >= 3 })
		for _, id := range ids {
			st, err := s.Guard(ctx, id, "n1", leases[id].Epoch)
			require.NoError(t, err, id)
			require.Equal(t, leases[id].Revision, st.Revision, "%s: the id record was rewritten", id)
			require.True(t, st.Expires.After(leases[id].Expires), "%s: expiry follows the node lease", id)
			require.True(t, leases[id].Valid())
		}

		// The node dies (no more renewals): every id lapses with the node
		// lease, at the same instant.
		require.NoError(t, ss.Orphan())
		testutil.WaitFor(t, 2*time.Second, "the ids lapse", func() bool {
			st, err := s.Owner(ctx, "a")
			require.NoError(t, err)
			return !st.Held
		})
		for _, id := range ids {
			st, err := s.Owner(ctx, id)
			require.NoError(t, err)
			require.False(t, st.Held, "%s is still held after its node lease lapsed", id)
			require.False(t, leases[id].Valid())
		}
		// A takeover retires the lapsed session first, then takes the id
		// with one conditional write; the other ids follow without
		// another node lease write.
		l2, err := s.Claim(ctx, "a", "n2", time.Minute)
		require.NoError(t, err)
		require.Equal(t, leases["a"].Epoch+1, l2.Epoch)
		nl, err := handles.Of(w).KV.Get(ctx, wire.NodeKey("n1"))
		require.NoError(t, err)
		rec, err := wire.DecodeRecord(nl.Value())
		require.NoError(t, err)
		require.Equal(t, wire.StateFree, rec.State, "the lapsed session was retired")
		nlRev := nl.Revision()
		l3, err := s.Seize(ctx, "b.c", "n2", time.Minute, false)
		require.NoError(t, err)
		require.Equal(t, leases["b.c"].Epoch+1, l3.Epoch)
		nl, err = handles.Of(w).KV.Get(ctx, wire.NodeKey("n1"))
		require.NoError(t, err)
		require.Equal(t, nlRev, nl.Revision(), "a retired session is retired once")

		// A new session of the same node gets a new epoch and does not
		// revive the ids of the old one.
		ss2, err := s.OpenSession(ctx, "n1", ttl)
		require.NoError(t, err)
		defer ss2.Orphan()
		require.Greater(t, ss2.Epoch(), ss.Epoch())
		st, err := s.Owner(ctx, "日本")
		require.NoError(t, err)
		require.False(t, st.Held, "a new session revived an id of the old one")
	})
}

func TestSession_EndFreesAllAtOnce(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{})
	ctx := testutil.Ctx(t, time.Minute)
	s := w.Ownership
	ss, err := s.OpenSession(ctx, "n", time.Minute)
	require.NoError(t, err)
	for i := range 20 {
		_, err := ss.Claim(ctx, fmt.Sprint("id-", i))
		require.NoError(t, err)
	}
	seq := lastSeq(t, w)
	require.NoError(t, ss.CloseContext(ctx))
	require.Equal(t, seq+1, lastSeq(t, w), "ending a session is one write")
	waitDone(t, ss.Done(), time.Second)
	require.ErrorIs(t, ss.Err(), ownership.ErrClosed)
	for i := range 20 {
		st, err := s.Owner(ctx, fmt.Sprint("id-", i))
		require.NoError(t, err)
		require.False(t, st.Held)
	}
	_, err = ss.Claim(ctx, "late")
	require.ErrorIs(t, err, ownership.ErrClosed, "an ended session claims nothing")
}

func TestSession_HeldAndAcquire(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{})
	ctx := testutil.Ctx(t, time.Minute)
	s := w.Ownership
	const ttl = 400 * time.Millisecond
	old, err := s.OpenSession(ctx, "n", ttl)
	require.NoError(t, err)
	_, err = s.OpenSession(ctx, "n", ttl)
	require.ErrorIs(t, err, ownership.ErrHeld, "two live sessions of one node")
	require.NoError(t, old.Close()) // the old process dies
	start := time.Now()
	ss, err := s.AcquireSession(ctx, "n", ttl)
	require.NoError(t, err, "a node retries until it gets its lease")
	defer ss.Orphan()
	require.Less(t, time.Since(start), ttl+500*time.Millisecond)
	require.Greater(t, ss.Epoch(), old.Epoch())
}

func TestSession_SelfFence(t *testing.T) {
	const ttl = time.Second
	for _, tc := range []struct {
		name  string
		cause fencing.Cause
		do    func(t *testing.T, w *client.World, ss *ownership.Session)
	}{
		{"node lease deleted", fencing.CauseRecordMissing, func(t *testing.T, w *client.World, ss *ownership.Session) {
			require.NoError(t, handles.Of(w).KV.Delete(testutil.Ctx(t, time.Minute), wire.NodeKey(ss.Node())))
		}},
		{"node lease replaced", fencing.CauseRecordMismatch, func(t *testing.T, w *client.World, ss *ownership.Session) {
			_, err := handles.Of(w).KV.Put(testutil.Ctx(t, time.Minute), wire.NodeKey(ss.Node()), []byte(`{"v":1,"node":"x","epoch":99,"state":"free","ttl_ms":0,"acquired":"0001-01-01T00:00:00Z","expires":"0001-01-01T00:00:00Z"}`))
			require.NoError(t, err)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := testutil.Start(t, testutil.Targets()[0])
			w := env.World(t, world.Config{})
			ctx := testutil.Ctx(t, time.Minute)
			ss, err := w.Ownership.OpenSession(ctx, "n", ttl)
			require.NoError(t, err)
			defer ss.Orphan()
			l, err := ss.Claim(ctx, "id")
			require.NoError(t, err)
			tc.do(t, w, ss)
			waitDone(t, ss.Done(), 5*time.Second)
			require.Equal(t, tc.cause, ss.Cause())
			require.False(t, l.Valid(), "an id lease outlived its fenced session")
			st, err := w.Ownership.Owner(ctx, "id")
			require.NoError(t, err)
			require.False(t, st.Held)
		})
	}
}

// TestSession_ManyIDs holds 100,000 ids through one node lease and counts
// the bucket writes per renewal period: O(1), not O(ids). Then the node
// dies and all ids are free at once. FENCEPOST_MANY_IDS overrides the
// count.
//
//	go test -race -run TestSession_ManyIDs -v ./ownership/
func TestSession_ManyIDs(t *testing.T) {
	n := 100_000
	if v, err := strconv.Atoi(os.Getenv("FENCEPOST_MANY_IDS")); err == nil {
		n = v
	}
	if testing.Short() {
		n = 2_000
	}
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{Storage: world.MemoryStorage})
	ctx := testutil.Ctx(t, 10*time.Minute)
	s := w.Ownership
	const ttl = time.Second
	ss, err := s.OpenSession(ctx, "big", ttl)
	require.NoError(t, err)
	defer ss.Orphan()

	t0 := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	const workers = 32
	for wk := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := wk; i < n; i += workers {
				if _, err := ss.Claim(ctx, fmt.Sprint("id-", i)); err != nil {
					select {
					case errs <- fmt.Errorf("claim %d: %w", i, err):
					default:
					}
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	require.NoError(t, <-errs)
	t.Logf("claimed %d ids through one node lease in %v", n, time.Since(t0).Round(time.Millisecond))
	require.NoError(t, ss.Err(), "the session survived the claims")

	// Count every write to the bucket over a few renewal periods. A
	// renewal is stored before the keeper counts it, so each reading is
	// taken just after a renewal was counted: the next one is ttl/3 away,
	// and none is stored but not yet counted while the bucket is read.
	const periods = 3
	afterRenewal := func() (uint64, uint64) {
		r := ss.Renewals()
		testutil.WaitFor(t, 2*ttl, "a node lease renewal", func() bool { return ss.Renewals() > r })
		return ss.Renewals(), lastSeq(t, w)
	}
	r0, seq0 := afterRenewal()
	time.Sleep(periods * ttl) // measuring a rate over a fixed span, not synchronising
	r1, seq1 := afterRenewal()
	writes := seq1 - seq0
	t.Logf("%d ids held: %d bucket writes in %d renewal periods of %v (%d node lease renewals)", n, writes, periods, ttl, r1-r0)
	require.Equal(t, r1-r0, writes, "every write was a node lease renewal")
	require.LessOrEqual(t, writes, uint64(periods*3+2), "O(1) writes per period")
	require.GreaterOrEqual(t, writes, uint64(periods*3-2))

	// Spot-check liveness, then the node dies: all ids lapse together.
	for _, i := range []int{0, n / 2, n - 1} {
		st, err := s.Owner(ctx, fmt.Sprint("id-", i))
		require.NoError(t, err)
		require.True(t, st.Held)
	}
	require.NoError(t, ss.Orphan())
	vu := ss.ValidUntil()
	time.Sleep(time.Until(vu.Add(ttl - ttl/3 + 150*time.Millisecond))) // past the published expiry
	seq := lastSeq(t, w)
	for _, i := range []int{0, 1, n / 3, n / 2, n - 1} {
		st, err := s.Owner(ctx, fmt.Sprint("id-", i))
		require.NoError(t, err)
		require.False(t, st.Held, "id-%d still held after the node lease lapsed", i)
	}
	require.Equal(t, seq, lastSeq(t, w), "the lapse of %d ids wrote nothing", n)
}

// TestSession_RetireRefusesLateRenewal: the old node's renewal, sent just
// before its authority ended, arrives only after the node lease lapsed and
// another node took an id over. The takeover retired the session first, so
// that renewal - the exact conditional write the keeper makes, replayed
// here because the server cannot delay one write for us - is refused: the
// old node cannot come back to an id it lost.
func TestSession_RetireRefusesLateRenewal(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{})
	ctx := testutil.Ctx(t, time.Minute)
	const ttl = time.Second
	ss, err := w.Ownership.OpenSession(ctx, "old", ttl)
	require.NoError(t, err)
	_, err = ss.Claim(ctx, "x")
	require.NoError(t, err)
	require.NoError(t, ss.Orphan()) // stalls: no renewal gets through
	last := ss.Lease()              // the revision its next renewal expects
	testutil.WaitFor(t, 5*time.Second, "the node lease lapses", func() bool {
		st, err := w.Ownership.Owner(ctx, "x")
		require.NoError(t, err)
		return !st.Held
	})
	l, err := w.Ownership.Claim(ctx, "x", "new", time.Minute)
	require.NoError(t, err)

	now := time.Now()
	late, err := wire.EncodeRecord(wire.Record{Node: "old", Epoch: ss.Epoch(), State: wire.StateHeld, TTLms: ttl.Milliseconds(), Acquired: now, Expires: now.Add(ttl)})
	require.NoError(t, err)
	_, err = handles.Of(w).KV.Update(ctx, wire.NodeKey("old"), late, last.Revision)
	require.ErrorIs(t, err, jetstream.ErrKeyRevisionMismatch, "the late renewal revived the retired session")
	st, err := w.Ownership.Guard(ctx, "x", "new", l.Epoch)
	require.NoError(t, err)
	require.True(t, st.Held)
}

// TestSession_SeizeFollowsStoreRules: a session's claim and seize are
// Store's (one set of rules): a forced seize writes the id's force key
// first, which is what lets the server keep forcing to operators
// (docs/security.md); an unforced seize of a live id is *LiveError and
// writes nothing; a claim of a held id is *HeldError.
func TestSession_SeizeFollowsStoreRules(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{})
	ctx := testutil.Ctx(t, time.Minute)
	l, err := w.Ownership.Claim(ctx, "x", "a", time.Minute)
	require.NoError(t, err)
	ss, err := w.Ownership.OpenSession(ctx, "b", 0)
	require.NoError(t, err)
	defer ss.Close()

	_, err = ss.Claim(ctx, "x")
	var held *ownership.HeldError
	require.ErrorAs(t, err, &held)
	_, err = ss.Seize(ctx, "x", false)
	var live *ownership.LiveError
	require.ErrorAs(t, err, &live)
	_, err = handles.Of(w).KV.Get(ctx, wire.ForceKey("x"))
	require.ErrorIs(t, err, jetstream.ErrKeyNotFound, "an unforced seize wrote the force key")

	seized, err := ss.Seize(ctx, "x", true)
	require.NoError(t, err)
	require.Equal(t, l.Epoch+1, seized.Epoch)
	e, err := handles.Of(w).KV.Get(ctx, wire.ForceKey("x"))
	require.NoError(t, err, "a session's forced seize must write the force key")
	f, err := wire.DecodeForce(e.Value())
	require.NoError(t, err)
	require.Equal(t, "b", f.Node)
	require.Less(t, e.Revision(), seized.Revision, "the force key comes before the record")
}

// TestSession_CloseReleasesOrphanLapses: Close frees every id at once (as
// etcd's Session.Close revokes its lease); Orphan stops renewing and the
// ids lapse with the node lease.
func TestSession_CloseReleasesOrphanLapses(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{})
	ctx := testutil.Ctx(t, time.Minute)
	ss, err := w.Ownership.OpenSession(ctx, "c", time.Minute)
	require.NoError(t, err)
	_, err = ss.Claim(ctx, "closed")
	require.NoError(t, err)
	require.NoError(t, ss.Close())
	require.NoError(t, ss.Close(), "Close is idempotent")
	st, err := w.Ownership.Owner(ctx, "closed")
	require.NoError(t, err)
	require.False(t, st.Held, "Close must free the session's ids at once")

	ss2, err := w.Ownership.OpenSession(ctx, "o", 300*time.Millisecond)
	require.NoError(t, err)
	_, err = ss2.Claim(ctx, "orphaned")
	require.NoError(t, err)
	require.NoError(t, ss2.Orphan())
	st, err = w.Ownership.Owner(ctx, "orphaned")
	require.NoError(t, err)
	require.True(t, st.Held, "an orphaned session's ids stay held until the lease lapses")
	testutil.WaitFor(t, 5*time.Second, "the orphaned session's id lapses", func() bool {
		st, err := w.Ownership.Owner(ctx, "orphaned")
		return err == nil && !st.Held
	})
}

// TestSession_ReleaseHeld: a session frees an id it holds with one request
// (the conditional write; Release reads the record and the node lease
// first), and only while the record is the one its lease names: an id
// seized from it stays the seizer's (not-owner, nothing written), an id
// whose record the holder rewrote (Touch) is still freed, through
// Release's read, and a session that ended releases nothing.
func TestSession_ReleaseHeld(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{})
	s := w.Ownership
	ctx := testutil.Ctx(t, time.Minute)
	ss, err := s.OpenSession(ctx, "n1", time.Minute)
	require.NoError(t, err)
	defer ss.Orphan()
	// The reads the release sends (direct gets and leader reads of any
	// key), seen by a connection of the test's own: none.
	tap := testutil.NewTap(t, env.URL, jsapi.APIDirectGet+">", jsapi.APIMsgGet+">")

	l, err := ss.Claim(ctx, "a")
	require.NoError(t, err)
	tap.Take(t)
	require.NoError(t, ss.ReleaseHeld(ctx, l))
	require.Empty(t, tap.Take(t), "reads to release a held id (Release sends a record read and a node lease read)")
	st, err := s.Owner(ctx, "a")
	require.NoError(t, err)
	require.False(t, st.Held)
	require.Equal(t, l.Epoch, st.Epoch, "a release keeps the epoch")
	l2, err := s.Claim(ctx, "a", "n2", time.Minute)
	require.NoError(t, err)
	require.Equal(t, l.Epoch+1, l2.Epoch)

	// Seized from the session: the write is refused, Release's read says
	// who holds it, and the seizer keeps it.
	lb, err := ss.Claim(ctx, "b")
	require.NoError(t, err)
	seized, err := s.Seize(ctx, "b", "n3", time.Minute, true)
	require.NoError(t, err)
	seq := lastSeq(t, w)
	require.ErrorIs(t, ss.ReleaseHeld(ctx, lb), ownership.ErrNotOwner)
	require.Equal(t, seq, lastSeq(t, w), "a refused release wrote something")
	_, err = s.Guard(ctx, "b", "n3", seized.Epoch)
	require.NoError(t, err, "the seizer lost the id to a stale release")

	// Rewritten by its holder (the revision moved): freed all the same.
	lc, err := ss.Claim(ctx, "c")
	require.NoError(t, err)
	_, err = s.Touch(ctx, "c", "n1", lc.Epoch)
	require.NoError(t, err)
	require.NoError(t, ss.ReleaseHeld(ctx, lc))
	st, err = s.Owner(ctx, "c")
	require.NoError(t, err)
	require.False(t, st.Held)

	// A session that ended: its node lease went with it, and so did the
	// id; nothing is written.
	ss2, err := s.OpenSession(ctx, "n4", time.Minute)
	require.NoError(t, err)
	ld, err := ss2.Claim(ctx, "d")
	require.NoError(t, err)
	require.NoError(t, ss2.Close())
	seq = lastSeq(t, w)
	require.ErrorIs(t, ss2.ReleaseHeld(ctx, ld), ownership.ErrFree)
	require.Equal(t, seq, lastSeq(t, w), "a release after the session ended wrote something")
}
