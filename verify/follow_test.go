package verify

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/fencing"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/testkit/history"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// TestFollower_AttributesAndFlagsUnfenced: the follower reads cursor
// writes from the bucket stream as stored (the fence headers included):
// a fenced write is a commit of the holder its fence's record revision
// names, an unfenced one (no fence, or the fence of another id's record)
// is reported as such, and the broker refuses a write whose fence is
// stale, so the follower never sees it.
func TestFollower_AttributesAndFlagsUnfenced(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{})
	ctx := testutil.Ctx(t, 30*time.Second)
	fol, err := followBucket(ctx, env.Client.JetStream(), w.Name, 0)
	require.NoError(t, err)
	defer fol.stop()

	l, err := w.Ownership.Claim(ctx, "x", "n1", time.Minute)
	require.NoError(t, err)
	other, err := w.Ownership.Claim(ctx, "y", "n2", time.Minute)
	require.NoError(t, err)
	js := env.Client.JetStream()
	put := func(cursor, rev uint64, fenceOf string) error {
		body, err := wire.EncodeCursor(wire.Cursor{Seq: cursor})
		require.NoError(t, err)
		m := nats.NewMsg(wire.KeySubject(w.Name, wire.CursorKey("x")))
		m.Data = body
		if rev != 0 {
			m.Header.Set(fencing.HeaderExpectedSeq, fmt.Sprint(rev))
			m.Header.Set(fencing.HeaderExpectedSubject, wire.RecordSubject(w.Name, fenceOf))
		}
		ack, err := js.PublishMsg(ctx, m)
		if err == nil {
			// The bucket keeps one revision per key: wait until the
			// follower read this one before the next replaces it.
			testutil.WaitFor(t, 10*time.Second, "the follower reads the write", func() bool { return fol.caughtUp(ack.Sequence) })
		}
		return err
	}
	require.NoError(t, put(1, l.Revision, "x"))          // a commit of n1/1
	require.NoError(t, put(2, 0, ""))                    // no fence
	require.NoError(t, put(3, other.Revision, "y"))      // the fence of y's record
	require.Error(t, put(4, l.Revision-1, "x"), "stale") // refused by the broker

	commits, _, unfenced, cov := fol.commits(nil, nil)
	require.Len(t, commits, 1)
	c := commits[0]
	require.Equal(t, history.Commit{ID: "x", Node: "n1", Epoch: l.Epoch, Revision: l.Revision, Cursor: 1, StreamSeq: c.StreamSeq, At: c.At}, c)
	require.Len(t, unfenced, 2)
	require.Equal(t, uint64(2), unfenced[0].Cursor)
	require.Equal(t, uint64(3), unfenced[1].Cursor)
	require.Zero(t, cov.Unattributed)
	require.Zero(t, cov.Bad)
	require.Zero(t, cov.Skipped)
}
