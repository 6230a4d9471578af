package world_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/queue"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// TestTimers_Layout: a new world has its timer stream (schedules on,
// rollups on, discard old, no limit that drops a message, the mailbox's
// message size) and a mailbox stream that sources its fired subjects into
// the mailboxes. A world made before timers opens without them, and
// Create with its settings (`world add`) adds them, once; its mail is
// kept.
func TestTimers_Layout(t *testing.T) {
	env := testutil.Start(t, testutil.Target{Name: "single"})
	ctx := testutil.Ctx(t, time.Minute)
	js := env.Client.JetStream()
	w := env.World(t, world.Config{MaxBody: 1000, MaxHeaders: 2000})
	require.True(t, w.AllowsTimers())
	s, err := js.Stream(ctx, wire.TimerStream(w.Name))
	require.NoError(t, err)
	cfg := s.CachedInfo().Config
	require.True(t, cfg.AllowMsgSchedules)
	require.True(t, cfg.AllowRollup)
	require.Equal(t, jetstream.DiscardOld, cfg.Discard)
	require.Equal(t, int64(-1), cfg.MaxBytes)
	require.Equal(t, int64(-1), cfg.MaxMsgsPerSubject)
	require.Equal(t, time.Duration(0), cfg.MaxAge)
	require.Equal(t, int32(3000), cfg.MaxMsgSize)
	require.Equal(t, []string{wire.TimerFilter(w.Name), wire.FiredFilter(w.Name)}, cfg.Subjects)
	mb := handles.Of(w).Mailbox.CachedInfo().Config
	require.Len(t, mb.Sources, 1)
	require.Equal(t, wire.TimerStream(w.Name), mb.Sources[0].Name)
	require.Equal(t, []jetstream.SubjectTransformConfig{{Source: wire.FiredFilter(w.Name), Destination: wire.FiredDestination(w.Name)}}, mb.Sources[0].SubjectTransforms)
	require.Equal(t, jetstream.DiscardNew, mb.Discard, "the mailboxes keep their limits")
	require.False(t, mb.AllowRollup)

	// A world made before timers.
	old := env.World(t, world.Config{})
	mb = handles.Of(old).Mailbox.CachedInfo().Config
	mb.Sources = nil
	_, err = js.UpdateStream(ctx, mb)
	require.NoError(t, err)
	require.NoError(t, js.DeleteStream(ctx, wire.TimerStream(old.Name)))
	_, err = old.Send(ctx, "kept", []byte("x"))
	require.NoError(t, err)
	ow, err := world.Open(ctx, js, old.Name)
	require.NoError(t, err)
	require.False(t, ow.AllowsTimers())
	for range 2 {
		ow, err = world.Create(ctx, js, old.Name, ow.Config)
		require.NoError(t, err)
		require.True(t, ow.AllowsTimers())
		require.Len(t, handles.Of(ow).Mailbox.CachedInfo().Config.Sources, 1, "added once")
	}
	info, err := handles.Of(ow).Mailbox.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(1), info.State.Msgs, "its mail is kept")
	p, err := queue.New(ow).Send(ctx, "t", []byte("x"), queue.WithAfter(500*time.Millisecond))
	require.NoError(t, err)
	subj := wire.MailboxSubject(old.Name, "t")
	testutil.WaitFor(t, 15*time.Second, "the timer fired", func() bool {
		info, err := handles.Of(ow).Mailbox.Info(ctx, jetstream.WithSubjectFilter(subj))
		require.NoError(t, err)
		return info.State.Subjects[subj] == 1
	})
	require.True(t, time.Now().After(p.At))
}

// TestTimers_ResetAndRemove: a reset drops the pending timers and the
// fired copies with the mailboxes (none fires after it, none is sourced
// again into the new mailbox stream); a timer set after the reset fires;
// a remove deletes the timer stream.
func TestTimers_ResetAndRemove(t *testing.T) {
	env := testutil.Start(t, testutil.Target{Name: "single"})
	ctx := testutil.Ctx(t, time.Minute)
	js := env.Client.JetStream()
	w := env.World(t, world.Config{})
	inMailbox := func(id string) uint64 {
		info, err := js.Stream(ctx, wire.MailboxStream(w.Name))
		require.NoError(t, err)
		i, err := info.Info(ctx, jetstream.WithSubjectFilter(wire.MailboxSubject(w.Name, id)))
		require.NoError(t, err)
		return i.State.Subjects[wire.MailboxSubject(w.Name, id)]
	}
	_, err := w.Send(ctx, "fired", []byte("x"), queue.WithAfter(200*time.Millisecond))
	require.NoError(t, err)
	testutil.WaitFor(t, 15*time.Second, "fired", func() bool { return inMailbox("fired") == 1 })
	pending, err := w.Send(ctx, "pending", []byte("x"), queue.WithAfter(time.Second))
	require.NoError(t, err)

	require.NoError(t, world.Reset(ctx, js, w.Name))
	w2, err := env.Client.World(ctx, w.Name)
	require.NoError(t, err)
	require.True(t, w2.AllowsTimers())
	_, err = w2.Send(ctx, "after", []byte("x"), queue.WithAfter(time.Second))
	require.NoError(t, err)
	testutil.WaitFor(t, 15*time.Second, "the timer set after the reset fired", func() bool { return inMailbox("after") == 1 })
	testutil.WaitFor(t, 5*time.Second, "past the pending timer's time", func() bool { return time.Since(pending.At) > 500*time.Millisecond })
	require.Zero(t, inMailbox("pending"), "a timer pending at the reset never fires")
	require.Zero(t, inMailbox("fired"), "a fired copy is not sourced again")

	require.NoError(t, world.Remove(ctx, js, w.Name))
	_, err = js.Stream(ctx, wire.TimerStream(w.Name))
	require.ErrorIs(t, err, jetstream.ErrStreamNotFound)
}
