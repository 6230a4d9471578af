package daemon_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/daemon"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/server/servertest"
	"github.com/fencepost/fencepost/testkit/testutil"
)

// copyAuth copies what docs/security.md says a cluster's members share
// (the first member's auth directory and its creds files) from one data
// dir to another.
func copyAuth(t *testing.T, from, to string) {
	t.Helper()
	require.NoError(t, os.CopyFS(filepath.Join(to, "auth"), os.DirFS(filepath.Join(from, "auth"))))
	files, err := filepath.Glob(filepath.Join(from, "*.creds"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(to, filepath.Base(f)), b, 0o600))
	}
}

// TestAuth_Cluster: three fencepostd --auth members that share the first
// one's auth directory serve the default world at 3 replicas, and each
// role's credentials act the same through any of them:
//   - a producer posts through fp-2, and node-b's owner drains through
//     fp-3 what it holds;
//   - a producer's and node-a's answers aimed at node-b's record, cursor,
//     lock, lease and the other keys (TestAttack_ReplySubjectsWriteNothing),
//     through fp-2 and fp-1, write nothing but their own keys;
//   - node-a's cursor of node-b's id, written through fp-1, is put back by
//     the members' auditors and nothing is purged below it: node-b drains
//     every message once;
//   - node-a's record written over node-b's claim before the members'
//     watches deliver the claim is freed above the claim's epoch
//     (TestAttack_ClaimWrittenOverBeforeTheWatch).
func TestAuth_Cluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-member cluster")
	}
	const n = 3
	dirs := make([]string, n)
	var routes []string
	ports := make([]int, n)
	for i := range n {
		dirs[i], ports[i] = t.TempDir(), freeTCPPort(t)
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[i]))
	}
	start := func(i int) *started {
		return startDaemon(t, dirs[i], "--auth", "--server-name", fmt.Sprintf("fp-%d", i+1),
			"--cluster", fmt.Sprintf("127.0.0.1:%d", ports[i]), "--routes", strings.Join(routes, ","))
	}
	members := []*started{start(0)}
	for i := 1; i < n; i++ {
		copyAuth(t, dirs[0], dirs[i])
		members = append(members, start(i))
	}
	for _, m := range members {
		servertest.CheckFor(t, 90*time.Second, 100*time.Millisecond, func() error {
			if code, body := m.get(t, "/readyz"); code != http.StatusOK {
				return fmt.Errorf("%s: readyz %d %s", m.d.Server().Name(), code, body)
			}
			return nil
		})
	}
	// Clients of each member, with the first member's credentials.
	at := make([]*authed, n)
	for i, m := range members {
		at[i] = &authed{started: m, dir: dirs[0]}
	}
	ctx := testutil.Ctx(t, 90*time.Second)
	op := at[0].as(t, daemon.RoleOperator)
	require.Equal(t, 3, op.w.Config.Replicas)
	js := op.c.JetStream()
	p := at[1].as(t, daemon.RoleProducer)
	b := at[2].asFile(t, at[0].node(t, "node-b").File)
	mallory := at[0].node(t, "node-a")

	l, err := b.w.Ownership.Claim(ctx, "victim", "node-b", time.Minute)
	require.NoError(t, err)
	want := []string{"one", "two", "three"}
	for _, body := range want {
		_, err := p.w.Send(ctx, "victim", []byte(body))
		require.NoError(t, err)
	}

	for _, who := range []struct {
		name, path, own string
		via             int
	}{
		{"producer via fp-2", daemon.CredsFile(dirs[0], daemon.RoleProducer), "", 1},
		{"node-a via fp-1", mallory.File, wire.NodeKey("node-a"), 0},
	} {
		nc, _ := rawConn(t, members[who.via].d.ClientURL(), who.path)
		settle(t, ctx, js)
		before := at[0].snapshot(t, ctx, js)
		aimAnswers(t, ctx, nc, replyTargets("victim", "node-b"), who.own)
		settle(t, ctx, js)
		after := at[0].snapshot(t, ctx, js)
		allowed := []string{wire.MailboxSubject("default", "attack"), wire.MailboxSubject("default", "settle"), wire.KeySubject("default", wire.ForceKey("settle"))}
		if who.own != "" {
			allowed = append(allowed, wire.KeySubject("default", who.own))
		}
		require.Empty(t, after.writtenSince(before, allowed), "%s: written through an answer aimed at them", who.name)
	}

	var got []string
	handle := func(_ context.Context, m drain.Message) error {
		got = append(got, string(m.Body))
		return nil
	}
	_, err = b.w.Drainer.DrainLease(ctx, l, handle, drain.WithMax(1))
	require.NoError(t, err)
	subj := wire.MailboxSubject("default", "victim")
	stored := func() uint64 {
		mb, err := js.Stream(ctx, wire.MailboxStream("default"))
		require.NoError(t, err)
		info, err := mb.Info(ctx, jetstream.WithSubjectFilter(subj))
		require.NoError(t, err)
		return info.State.Subjects[subj]
	}
	servertest.CheckFor(t, 20*time.Second, 50*time.Millisecond, func() error {
		if s := stored(); s != 2 {
			return fmt.Errorf("stored %d, want 2 (1 committed, purged by fencepostd)", s)
		}
		return nil
	})
	mb, err := js.Stream(ctx, wire.MailboxStream("default"))
	require.NoError(t, err)
	info, err := mb.Info(ctx)
	require.NoError(t, err)
	c, err := wire.EncodeCursor(wire.Cursor{Seq: info.State.LastSeq})
	require.NoError(t, err)
	_, err = at[0].asFile(t, mallory.File).bucket(t).Put(ctx, wire.CursorKey("victim"), c)
	require.NoError(t, err, "admitted by the server")
	servertest.CheckFor(t, 20*time.Second, 50*time.Millisecond, func() error {
		if detected(t, members, daemon.ForgedCursorNode) < 1 {
			return fmt.Errorf("no member's auditor detected the cursor")
		}
		e, err := op.bucket(t).Get(ctx, wire.CursorKey("victim"))
		if err != nil {
			return err
		}
		if cur, err := wire.DecodeCursor(e.Value()); err != nil || cur.Seq == info.State.LastSeq {
			return fmt.Errorf("cursor %s not put back yet", e.Value())
		}
		return nil
	})
	require.EqualValues(t, 2, stored(), "nothing purged below the forged cursor")
	_, err = b.w.Drainer.DrainLease(ctx, l, handle)
	require.NoError(t, err)
	require.Equal(t, want, got, "every message once, in order")

	// node-b's claim through fp-3, written over by node-a through fp-1
	// before the members' watches deliver it: the bucket's leader
	// republishes both writes, every member's auditor gets them, and the
	// epoch given to node-b is not left held by node-a.
	key := wire.RecordKey("twice")
	missWrites(t, "twice", func(r wire.Record, _ []byte) bool { return r.Node == "node-b" && r.Epoch == 1 })
	claim, err := b.w.Ownership.Claim(ctx, "twice", "node-b", time.Minute)
	require.NoError(t, err)
	malKV := at[0].asFile(t, mallory.File).bucket(t)
	e, err := malKV.Get(ctx, key)
	require.NoError(t, err)
	_, err = malKV.Update(ctx, key, heldBy(t, "node-a", claim.Epoch), e.Revision())
	require.NoError(t, err, "stored: the server checks the subject and the revision")
	servertest.CheckFor(t, 20*time.Second, 50*time.Millisecond, func() error {
		if detected(t, members, daemon.ForgedEpochBack) < 1 {
			return fmt.Errorf("no member's auditor detected the epoch held twice")
		}
		st, err := op.w.Ownership.Owner(ctx, "twice")
		if err != nil {
			return err
		}
		if st.Held || st.Epoch < claim.Epoch {
			return fmt.Errorf("twice: held=%v by %s at epoch %d", st.Held, st.Node, st.Epoch)
		}
		return nil
	})
	again, err := b.w.Ownership.Claim(ctx, "twice", "node-b", time.Minute)
	require.NoError(t, err)
	require.Greater(t, again.Epoch, claim.Epoch, "epoch %d given once", claim.Epoch)
}

// detected sums the members' counts of forgeries of kind.
func detected(t *testing.T, members []*started, kind string) float64 {
	t.Helper()
	var n float64
	for _, m := range members {
		n += max(0, m.metric(t, forgeries(kind)))
	}
	return n
}
