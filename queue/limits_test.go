package queue_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/queue"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// TestLimits: each limit a world shows is the one it enforces
// (docs/design.md section 5, "Limits say what they enforce"), on one node and on an R3 cluster.
func TestLimits(t *testing.T) {
	for _, tg := range testutil.Targets() {
		t.Run(tg.Name, func(t *testing.T) {
			env := testutil.Start(t, tg)
			t.Run("BodyExactly", func(t *testing.T) { testBodyExactly(t, env) })
			t.Run("FullKinds", func(t *testing.T) { testFullKinds(t, env) })
			t.Run("LegacyWorld", func(t *testing.T) { testLegacyWorld(t, env) })
		})
	}
}

// stored is the number of messages on id's mailbox subject.
func stored(t *testing.T, w *client.World, id string) uint64 {
	t.Helper()
	subj := wire.MailboxSubject(w.Name, id)
	info, err := handles.Of(w).Mailbox.Info(testutil.Ctx(t, 10*time.Second), jetstream.WithSubjectFilter(subj))
	require.NoError(t, err)
	return info.State.Subjects[subj]
}

// testBodyExactly: a body of exactly max_body is posted, also with
// exactly max_headers of headers (so the stream's own limit is max_body +
// max_headers); one byte more of either is refused before sending, with
// the limit named, and nothing is stored.
func testBodyExactly(t *testing.T, env *testutil.Env) {
	ctx := testutil.Ctx(t, time.Minute)
	w := env.World(t, world.Config{MaxBody: 100, MaxHeaders: 400})
	require.Equal(t, int32(500), w.Config.MaxMsgSize)
	require.Equal(t, int32(500), handles.Of(w).Mailbox.CachedInfo().Config.MaxMsgSize, "the broker's limit is body plus header room")
	q := w.Queue
	require.Equal(t, 100, q.MaxBody())
	require.Equal(t, 400, q.MaxHeaders())

	// Headers of exactly 400 bytes as the server counts them.
	h := nats.Header{}
	h.Set(queue.HeaderFrom, "me")
	h.Set(queue.HeaderMsgID, wire.ScopedMsgID("a", "k1"))
	h.Set("X-Pad", "")
	pad := strings.Repeat("p", 400-queue.HeaderSize(h))
	full := []queue.SendOption{queue.WithFrom("me"), queue.WithMsgID("k1"), queue.WithHeader("X-Pad", pad)}

	p, err := q.Send(ctx, "a", make([]byte, 100), full...)
	require.NoError(t, err, "max_body with max_headers is posted")
	require.False(t, p.Duplicate)
	_, err = q.Send(ctx, "a", make([]byte, 100))
	require.NoError(t, err, "max_body without headers is posted")

	_, err = q.Send(ctx, "a", make([]byte, 101))
	var tl *queue.TooLargeError
	require.ErrorAs(t, err, &tl)
	require.ErrorIs(t, err, queue.ErrTooLarge)
	require.Equal(t, queue.TooLargeError{Of: queue.LimitMaxBody, Size: 101, Limit: 100}, *tl)
	require.EqualError(t, err, "queue: the body is 101 bytes, this world's max_body is 100; nothing was sent")

	_, err = q.Send(ctx, "a", []byte("x"), queue.WithFrom("me"), queue.WithMsgID("k2"), queue.WithHeader("X-Pad", pad+"p"))
	require.ErrorAs(t, err, &tl)
	require.Equal(t, queue.TooLargeError{Of: queue.LimitMaxHeaders, Size: 401, Limit: 400}, *tl)
	require.ErrorContains(t, err, "max_headers is 400")
	require.Equal(t, uint64(2), stored(t, w, "a"), "nothing of the refused posts is stored")

	// The default world: a body of max_body with the most headers fits
	// nats-server's default max_payload of 1 MiB.
	d := env.World(t, world.Config{})
	require.Equal(t, int(world.Defaults.MaxBody), d.Queue.MaxBody())
	require.Equal(t, int32(1<<20), world.Defaults.MaxBody+world.Defaults.MaxHeaders)
	_, err = d.Queue.Send(ctx, "big", make([]byte, world.Defaults.MaxBody), queue.WithFrom("me"), queue.WithMsgID("k"))
	require.NoError(t, err)
	_, err = d.Queue.Send(ctx, "big", make([]byte, world.Defaults.MaxBody+1))
	require.ErrorAs(t, err, &tl)
	require.Equal(t, queue.LimitMaxBody, tl.Of)

	// A world larger than the server's max_payload is refused when it is
	// made: its posts would meet a smaller limit than the one it shows.
	_, err = env.Client.CreateWorld(ctx, "toolarge", world.Config{MaxBody: 1 << 20})
	require.ErrorIs(t, err, world.ErrInvalidConfig)
	require.ErrorContains(t, err, "max_payload")
}

// testFullKinds: a mailbox at max_msgs answers full with that count and
// kind messages; a world at max_bytes answers full with that many bytes
// and kind bytes, for every mailbox, and holds no more than that.
func testFullKinds(t *testing.T, env *testutil.Env) {
	ctx := testutil.Ctx(t, time.Minute)
	w := env.World(t, world.Config{MaxMsgsPerMailbox: 2})
	for _, b := range []string{"1", "2"} {
		_, err := w.Queue.Send(ctx, "a", []byte(b))
		require.NoError(t, err)
	}
	_, err := w.Queue.Send(ctx, "a", []byte("3"))
	var full *queue.FullError
	require.ErrorAs(t, err, &full)
	require.ErrorIs(t, err, queue.ErrFull)
	require.Equal(t, queue.FullMessages, full.Kind)
	require.Equal(t, int64(2), full.Limit)
	require.ErrorContains(t, err, "2 messages, the world's max_msgs")
	_, err = w.Queue.Send(ctx, "b", []byte("1"))
	require.NoError(t, err, "another mailbox is not full")

	// Bytes are bytes, not a count of max_body: ten bodies of 100 bytes
	// never fit in 1000 bytes with their subjects and headers, but small
	// bodies are not held to ten messages.
	w = env.World(t, world.Config{MaxBody: 100, MaxBytes: 1000})
	require.Equal(t, int64(1000), w.Queue.MaxBytes())
	require.Equal(t, world.Defaults.MaxMsgsPerMailbox, w.Queue.Limit(), "max_bytes is not folded into the count")
	require.Equal(t, int64(1000), handles.Of(w).Mailbox.CachedInfo().Config.MaxBytes)
	posted := 0
	for ; posted < 20; posted++ {
		if _, err = w.Queue.Send(ctx, "a", make([]byte, 100)); err != nil {
			break
		}
	}
	require.ErrorAs(t, err, &full)
	require.Equal(t, queue.FullBytes, full.Kind)
	require.Equal(t, int64(1000), full.Limit)
	require.ErrorContains(t, err, "max_bytes of 1000 bytes")
	require.Greater(t, posted, 1)
	require.Less(t, posted, 10)
	info, err := handles.Of(w).Mailbox.Info(ctx)
	require.NoError(t, err)
	require.LessOrEqual(t, info.State.Bytes, uint64(1000))
	require.Equal(t, uint64(posted), info.State.Msgs)
	_, err = w.Queue.Send(ctx, "b", make([]byte, 100))
	require.ErrorAs(t, err, &full, "the byte limit is the world's")
	require.Equal(t, queue.FullBytes, full.Kind)

	small := env.World(t, world.Config{MaxBody: 100, MaxBytes: 1000})
	for i := range 12 {
		_, err := small.Queue.Send(ctx, "a", []byte("x"))
		require.NoError(t, err, "small message %d", i)
	}
}

// testLegacyWorld: a world made before max_body (max_msg_size alone, and
// the byte limit per mailbox folded into a count) still opens, and
// enforces what it shows: its body limit is what its posts took before
// (max_msg_size less 1 KiB, at most half), its count the folded one.
func testLegacyWorld(t *testing.T, env *testutil.Env) {
	ctx := testutil.Ctx(t, time.Minute)
	name := env.LegacyWorld(t, 100, 100_000, 1000)
	w, err := env.Client.World(ctx, name)
	require.NoError(t, err)
	require.Equal(t, world.Config{
		MinTTL: w.Config.MinTTL, MaxTTL: w.Config.MaxTTL, DefaultTTL: w.Config.DefaultTTL,
		MaxBody: 50, MaxHeaders: 50, MaxMsgSize: 100, MaxMsgsPerMailbox: 100_000, MaxBytesPerMailbox: 1000,
		MaxDeliveries: 5, DedupeWindow: w.Config.DedupeWindow, Replicas: w.Config.Replicas, Storage: world.FileStorage, Purge: world.PurgeByOwner,
	}, w.Config)
	require.Equal(t, int64(10), w.Config.MailboxMsgs())
	require.Equal(t, int64(10), w.Queue.Limit())
	require.Zero(t, w.Queue.MaxBytes())

	_, err = w.Queue.Send(ctx, "a", make([]byte, 50))
	require.NoError(t, err)
	_, err = w.Queue.Send(ctx, "a", make([]byte, 51))
	var tl *queue.TooLargeError
	require.ErrorAs(t, err, &tl)
	require.Equal(t, queue.TooLargeError{Of: queue.LimitMaxBody, Size: 51, Limit: 50}, *tl)
	for range 9 {
		_, err = w.Queue.Send(ctx, "a", []byte("x"))
		require.NoError(t, err)
	}
	_, err = w.Queue.Send(ctx, "a", []byte("x"))
	var full *queue.FullError
	require.ErrorAs(t, err, &full)
	require.Equal(t, queue.FullMessages, full.Kind)
	require.Equal(t, int64(10), full.Limit)

	// A reset makes the stream again with the same limits.
	require.NoError(t, env.Client.ResetWorld(ctx, name))
	info, err := handles.Of(w).Mailbox.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(10), info.Config.MaxMsgsPerSubject)
	require.Equal(t, int32(100), info.Config.MaxMsgSize)
	require.Equal(t, int64(-1), info.Config.MaxBytes)
}
