package fencing_test

import (
	"errors"
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

// A handler's own write into the world's bucket, carrying the fence, is
// stored while the ownership record is unchanged and refused by the broker
// once another node took the id; the same holds for a raw message with the
// fence's headers (what a non-Go client sends).
func TestFence_GatesWritesInTheBucketStream(t *testing.T) {
	for _, tg := range testutil.Targets() {
		t.Run(tg.Name, func(t *testing.T) {
			env := testutil.Start(t, tg)
			w := env.World(t, world.Config{})
			ctx := testutil.Ctx(t, time.Minute)
			js := env.Client.JetStream()
			subj := wire.KeySubject(w.Name, "app.x")

			l, err := w.Ownership.Claim(ctx, "x", "n1", time.Minute)
			require.NoError(t, err)
			_, err = js.Publish(ctx, subj, []byte("1"), l.Fence.Expect())
			require.NoError(t, err, "a write under the current fence is stored")

			raw := &nats.Msg{Subject: subj, Data: []byte("2")}
			l.Fence.Apply(raw)
			require.Equal(t, l.Fence.RecordSubject(), raw.Header.Get("Nats-Expected-Last-Subject-Sequence-Subject"))
			_, err = js.PublishMsg(ctx, raw)
			require.NoError(t, err)

			_, err = w.Ownership.Seize(ctx, "x", "n2", time.Minute, true)
			require.NoError(t, err)
			info, err := handles.Of(w).Bucket.Info(ctx)
			require.NoError(t, err)
			before := info.State.LastSeq

			_, err = js.Publish(ctx, subj, []byte("3"), l.Fence.Expect())
			var apiErr *jetstream.APIError
			require.True(t, errors.As(err, &apiErr), "want an API error, got %v", err)
			require.Contains(t, []jetstream.ErrorCode{jetstream.JSErrCodeStreamWrongLastSequence, jetstream.JSErrCodeStreamWrongLastSequenceConstant}, apiErr.ErrorCode)
			raw = &nats.Msg{Subject: subj, Data: []byte("4")}
			l.Fence.Apply(raw)
			_, err = js.PublishMsg(ctx, raw)
			require.Error(t, err, "the raw fenced write is refused too")

			info, err = handles.Of(w).Bucket.Info(ctx)
			require.NoError(t, err)
			require.Equal(t, before, info.State.LastSeq, "a fenced-out write stored something")
		})
	}
}
