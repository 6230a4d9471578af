package world_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// TestReset_ClearsDedupeWindow: a stream purge keeps the stream's dedupe
// table, so a message posted after a reset with a message id used before it
// was answered "duplicate" and stored nowhere. Reset re-creates the mailbox
// stream: the second post is stored, with a sequence after the first one's,
// and the stream keeps its settings.
func TestReset_ClearsDedupeWindow(t *testing.T) {
	for _, tg := range testutil.Targets() {
		t.Run(tg.Name, func(t *testing.T) {
			env := testutil.Start(t, tg)
			w := env.World(t, world.Config{})
			ctx := testutil.Ctx(t, 30*time.Second)
			js := env.Client.JetStream()
			subj := wire.MailboxSubject(w.Name, "r")
			post := func(body string) (seq uint64, dup bool) {
				t.Helper()
				m := nats.NewMsg(subj)
				m.Header.Set("Nats-Msg-Id", "X")
				m.Data = []byte(body)
				ack, err := js.PublishMsg(ctx, m)
				require.NoError(t, err)
				return ack.Sequence, ack.Duplicate
			}

			first, dup := post("a")
			require.False(t, dup)
			before, err := handles.Of(w).Mailbox.Info(ctx)
			require.NoError(t, err)

			require.NoError(t, world.Reset(ctx, js, w.Name))
			info, err := handles.Of(w).Mailbox.Info(ctx)
			require.NoError(t, err)
			require.Zero(t, info.State.Msgs, "the reset drops the mailboxes")

			second, dup := post("b")
			require.False(t, dup, "a message id used before the reset is not a duplicate after it (seq %d)", second)
			require.Greater(t, second, first, "mailbox sequences continue across a reset")

			info, err = handles.Of(w).Mailbox.Info(ctx, jetstream.WithSubjectFilter(subj))
			require.NoError(t, err)
			require.Equal(t, uint64(1), info.State.Subjects[subj], "the message is stored")
			m, err := handles.Of(w).Mailbox.GetLastMsgForSubject(ctx, subj)
			require.NoError(t, err)
			require.Equal(t, "b", string(m.Data))
			require.Equal(t, second, m.Sequence)

			// The settings are the same (and the stream is not left sealed:
			// drains purge it).
			a, b := before.Config, info.Config
			require.Equal(t, a.Subjects, b.Subjects)
			require.Equal(t, a.Retention, b.Retention)
			require.Equal(t, a.Discard, b.Discard)
			require.Equal(t, a.DiscardNewPerSubject, b.DiscardNewPerSubject)
			require.Equal(t, a.MaxMsgsPerSubject, b.MaxMsgsPerSubject)
			require.Equal(t, a.MaxMsgSize, b.MaxMsgSize)
			require.Equal(t, a.Duplicates, b.Duplicates)
			require.Equal(t, a.Replicas, b.Replicas)
			require.Equal(t, a.Storage, b.Storage)
			require.True(t, b.AllowDirect)
			require.True(t, b.AllowAtomicPublish)
			require.False(t, b.Sealed)
			require.False(t, b.DenyPurge)
			require.False(t, b.DenyDelete)

			// The world opens as before.
			_, err = env.Client.World(ctx, w.Name)
			require.NoError(t, err)
		})
	}
}
