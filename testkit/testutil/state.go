package testutil

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/wire"
)

// Counter is a state handler: each message adds one to its id's "count"
// and appends its body to "seen". It records every call.
type Counter struct {
	mu    sync.Mutex
	calls []string
}

// Handle is the state handler.
func (c *Counter) Handle(_ context.Context, m drain.Message, st *drain.State) error {
	c.mu.Lock()
	c.calls = append(c.calls, string(m.Body))
	c.mu.Unlock()
	n := 0
	if v, ok := st.Get("count"); ok {
		n, _ = strconv.Atoi(string(v))
	}
	seen, _ := st.Get("seen")
	if err := st.Put("count", []byte(strconv.Itoa(n+1))); err != nil {
		return err
	}
	return st.Put("seen", append(seen, m.Body...))
}

// Bodies are the bodies of every call, in order.
func (c *Counter) Bodies() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.calls...)
}

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
