package testutil

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/ownership"
)

// StoredState reads id's state from the bucket through the stream leader
// (a KV get may be answered by a lagging replica on R3): the subjects from
// the stream info, each key's last message by a leader get.
func StoredState(t *testing.T, w *client.World, id string) map[string]string {
	t.Helper()
	ctx := Ctx(t, 10*time.Second)
	info, err := handles.Of(w).Bucket.Info(ctx, jetstream.WithSubjectFilter(wire.StateFilter(w.Name, id)))
	require.NoError(t, err)
	out := map[string]string{}
	for subj := range info.State.Subjects {
		m, err := jsapi.LeaderGet(ctx, handles.Of(w).JS.Conn(), wire.BucketStream(w.Name), jsapi.GetRequest{LastFor: subj})
		require.NoError(t, err)
		if jsapi.IsMarker(m.Header) {
			continue
		}
		key, err := wire.StateKeyOf(w.Name, id, subj)
		require.NoError(t, err)
		out[key] = string(m.Data)
	}
	return out
}

// HoldState opens a session of node and holds id through it with state
// (drain.Drainer.HoldState); the session closes when the test ends.
func HoldState(t *testing.T, ctx context.Context, w *client.World, d *drain.Drainer, node, id string) (*ownership.Session, *drain.Holding) {
	t.Helper()
	ss, err := w.Ownership.OpenSession(ctx, node, time.Minute)
	require.NoError(t, err)
	t.Cleanup(func() { ss.Close() })
	l, err := ss.Claim(ctx, id)
	require.NoError(t, err)
	h, err := d.HoldState(l)
	require.NoError(t, err)
	return ss, h
}
