package daemon_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/daemon"
	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/server/servertest"
	"github.com/fencepost/fencepost/testkit/testutil"
)

// The reply-subject class of attacks: a permission checks the subject a
// client publishes to, never the reply subject it names, and JetStream
// answers on that reply subject (a post's acknowledgement, a direct get's
// stored message with its headers, KV-Operation: DEL included, a
// JetStream API answer). In the account of the streams, the bucket stream
// $KV.fp_<w>.> and the mailbox stream stored the answer: any user wrote
// any key. Against a real fencepostd --auth, raw nats.go with each role's
// credentials aims every answer it can ask for at every subject of the
// world's streams; nothing is stored. The control is a user of the store
// account with the producer's permissions, whose same publish is stored:
// the class is the account's, and the accounts keep every client out of
// it.

// snapshot is what the world's two streams hold: every subject's last
// sequence (a key keeps one message, so a write of it changes its
// sequence, not its count).
type snapshot struct {
	bucket, mailbox map[string]uint64
}

func (a *authed) snapshot(t *testing.T, ctx context.Context, js jetstream.JetStream) snapshot {
	t.Helper()
	var s snapshot
	for _, x := range []struct {
		stream string
		to     *map[string]uint64
	}{{wire.BucketStream("default"), &s.bucket}, {wire.MailboxStream("default"), &s.mailbox}} {
		st, err := js.Stream(ctx, x.stream)
		require.NoError(t, err)
		info, err := st.Info(ctx, jetstream.WithSubjectFilter(">"))
		require.NoError(t, err)
		*x.to = map[string]uint64{}
		for subj := range info.State.Subjects {
			m, err := st.GetLastMsgForSubject(ctx, subj)
			require.NoError(t, err)
			(*x.to)[subj] = m.Sequence
		}
	}
	return s
}

// writtenSince lists the subjects of the world's streams written between
// snapshot before and s, but allowed and fencepostd's own marks of the
// highest epochs (h.<eid>, hn.<node>), which follow an attacker's writes
// of its own key.
func (s snapshot) writtenSince(before snapshot, allowed []string) []string {
	var written []string
	for _, m := range []struct {
		name          string
		before, after map[string]uint64
	}{{"bucket", before.bucket, s.bucket}, {"mailbox stream", before.mailbox, s.mailbox}} {
		for subj, n := range m.after {
			mark := strings.HasPrefix(subj, wire.KeySubject("default", "h.")) || strings.HasPrefix(subj, wire.KeySubject("default", "hn."))
			if !slices.Contains(allowed, subj) && !mark && m.before[subj] != n {
				written = append(written, m.name+" "+subj)
			}
		}
	}
	slices.Sort(written)
	return written
}

// replyTargets are the subjects of the world's streams an answer was
// aimed at: the issue's (a node lease, a record, a cursor, a lock, a
// state key, the settings entry, a dead letter) and every other kind.
func replyTargets(victim, node string) []string {
	return []string{
		wire.KeySubject("default", wire.NodeKey(node)),
		wire.RecordSubject("default", victim),
		wire.KeySubject("default", wire.CursorKey(victim)),
		wire.KeySubject("default", wire.LockKey(victim)),
		wire.KeySubject("default", wire.StateKey(victim, "count")),
		wire.KeySubject("default", wire.WorldKey),
		wire.KeySubject("default", wire.ForceKey(victim)),
		wire.BarrierSubject("default"),
		wire.DeadLetterSubject("default", victim),
		wire.MailboxSubject("default", victim),
	}
}

// rawConn is a raw nats.go connection with the credentials at path (and
// the inbox prefix they confine replies to), collecting the server's
// errors.
func rawConn(t *testing.T, url, path string) (*nats.Conn, *errs) {
	t.Helper()
	creds, err := daemon.ReadCreds(path)
	require.NoError(t, err)
	e := &errs{}
	nc, err := nats.Connect(url, creds.NATSOption(), nats.ErrorHandler(e.handler))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc, e
}

// aimAnswers sends, from nc, every request it can make with reply set to
// each target, and waits for one answer of its own afterwards. own is a
// key of the bucket the user may write (owners), "" for a producer.
func aimAnswers(t *testing.T, ctx context.Context, nc *nats.Conn, targets []string, own string) {
	t.Helper()
	kv := "$KV.fp_default."
	requests := []struct{ subject, body string }{
		{wire.MailboxSubject("default", "attack"), "a post"},
		{jsapi.APIDirectGet + wire.BucketStream("default") + "." + kv + wire.WorldKey, ""},
	}
	if own != "" {
		// A delete marker on a key of its own, then its direct get: the
		// answer carries KV-Operation: DEL (the issue's node-lease
		// delete).
		del := nats.NewMsg(kv + own)
		del.Header.Set("KV-Operation", "DEL")
		_, err := nc.RequestMsgWithContext(ctx, del)
		require.NoError(t, err)
		requests = append(requests,
			struct{ subject, body string }{jsapi.APIDirectGet + wire.BucketStream("default") + "." + kv + own, ""},
			struct{ subject, body string }{jsapi.APIDirectGet + wire.BucketStream("default"), fmt.Sprintf(`{"last_by_subj":%q}`, kv+own)},
			struct{ subject, body string }{jsapi.APIMsgGet + wire.BucketStream("default"), fmt.Sprintf(`{"last_by_subj":%q}`, kv+own)},
			struct{ subject, body string }{jsapi.APIStreamInfo + wire.MailboxStream("default"), ""},
			struct{ subject, body string }{kv + own, "a key write's acknowledgement"},
		)
	}
	for _, target := range targets {
		for _, r := range requests {
			require.NoError(t, nc.PublishRequest(r.subject, target, []byte(r.body)))
		}
		if own != "" {
			// A push consumer delivering every post into the target
			// (the deliver subject is in the request's body).
			req := fmt.Sprintf(`{"stream_name":%q,"config":{"deliver_subject":%q,"ack_policy":"none","deliver_policy":"all","inactive_threshold":60000000000}}`, wire.MailboxStream("default"), target)
			_, err := nc.RequestWithContext(ctx, "$JS.API.CONSUMER.CREATE."+wire.MailboxStream("default"), []byte(req))
			require.NoError(t, err)
		}
	}
	_, err := nc.RequestWithContext(ctx, wire.MailboxSubject("default", "attack"), []byte("the last"))
	require.NoError(t, err)
}

// settle writes a key as the operator and waits for its answer: anything
// the attacker's requests made the server send the streams was queued at
// the bucket before it (each answer is sent before the next request's),
// so it is stored by then.
func settle(t *testing.T, ctx context.Context, js jetstream.JetStream) {
	t.Helper()
	_, err := js.Publish(ctx, wire.KeySubject("default", wire.ForceKey("settle")), []byte("{}"))
	require.NoError(t, err)
	_, err = js.Publish(ctx, wire.MailboxSubject("default", "settle"), []byte("settle"))
	require.NoError(t, err)
}

func TestAttack_ReplySubjectsWriteNothing(t *testing.T) {
	a := startAuthed(t)
	ctx := testutil.Ctx(t, 30*time.Second)
	op := a.as(t, daemon.RoleOperator)
	js := op.c.JetStream()
	// node-b holds the victim through its node lease; the victim has
	// mail, a cursor, a lock and state.
	b := a.asFile(t, a.node(t, "node-b").File)
	ss, err := b.w.Ownership.OpenSession(ctx, "node-b", time.Minute)
	require.NoError(t, err)
	defer ss.Close()
	_, err = ss.Claim(ctx, "victim")
	require.NoError(t, err)
	_, err = b.w.Send(ctx, "victim", []byte("mail"))
	require.NoError(t, err)
	named, err := daemon.IssueCreds(a.dir, daemon.IssueRequest{Role: daemon.RoleProducer, Name: "shop"})
	require.NoError(t, err)
	mallory := a.node(t, "node-a")
	targets := replyTargets("victim", "node-b")

	for _, who := range []struct {
		name, path, own string
	}{
		{"producer.creds", daemon.CredsFile(a.dir, daemon.RoleProducer), ""},
		{"named producer", named.File, ""},
		{"owner.creds", daemon.CredsFile(a.dir, daemon.RoleOwner), wire.LockKey("owners-own")},
		{"node owner", mallory.File, wire.NodeKey("node-a")},
	} {
		t.Run(who.name, func(t *testing.T) {
			nc, _ := rawConn(t, a.d.ClientURL(), who.path)
			settle(t, ctx, js)
			before := a.snapshot(t, ctx, js)
			aimAnswers(t, ctx, nc, targets, who.own)
			settle(t, ctx, js)
			after := a.snapshot(t, ctx, js)
			// What the attacker may write itself: its posts to
			// "attack", its own key; and the operator's settle writes.
			allowed := []string{wire.MailboxSubject("default", "attack"), wire.MailboxSubject("default", "settle"),
				wire.KeySubject("default", wire.ForceKey("settle"))}
			if who.own != "" {
				allowed = append(allowed, wire.KeySubject("default", who.own))
			}
			require.Empty(t, after.writtenSince(before, allowed), "written through an answer aimed at them")
			for _, target := range targets {
				if target == wire.MailboxSubject("default", "victim") {
					continue // holds the victim's mail: unchanged above
				}
				if _, ok := before.bucket[target]; !ok {
					require.NotContains(t, after.bucket, target)
				}
			}
			st, err := op.w.Ownership.Owner(ctx, "victim")
			require.NoError(t, err)
			require.Equal(t, "node-b", st.Node, "node-b keeps its id")
			select {
			case <-ss.Done():
				t.Fatalf("node-b's session ended: %v", ss.Err())
			default:
			}
		})
	}

	// Control: a user of the store account with the producer's
	// permissions writes the node lease through the answer to a post.
	seed, err := os.ReadFile(filepath.Join(a.dir, "auth", "account.nk"))
	require.NoError(t, err)
	store, err := nkeys.FromSeed(bytes.TrimSpace(seed))
	require.NoError(t, err)
	path, _ := testutil.UserCreds(t, store, func(pub string, uc *jwt.UserClaims) {
		uc.Pub.Allow.Add(wire.MailboxFilter("default"))
		uc.Sub.Allow.Add("_INBOX." + pub + ".>")
	})
	nc, err := nats.Connect(a.d.ClientURL(), nats.UserCredentials(path))
	require.NoError(t, err)
	defer nc.Close()
	before := a.snapshot(t, ctx, js)
	target := wire.KeySubject("default", wire.NodeKey("node-c"))
	require.NoError(t, nc.PublishRequest(wire.MailboxSubject("default", "attack"), target, []byte("x")))
	require.NoError(t, nc.Flush())
	servertest.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		if a.snapshot(t, ctx, js).bucket[target] == before.bucket[target] {
			return fmt.Errorf("control: %s not written by the answer in the store account", target)
		}
		return nil
	})
}
