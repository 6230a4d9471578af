package store_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/internal/store"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// TestReadCursor_StoredSequenceIsTheServers: a cursor write that carries
// a Nats-Sequence header of its own (the broker stores any header a
// writer sends) is read at the sequence the server stored it at, on a
// single replica (a direct get) as on three (a leader read). nats.go's
// GetLastMsgForSubject read the first header of that name: the writer's.
func TestReadCursor_StoredSequenceIsTheServers(t *testing.T) {
	for _, tg := range testutil.Targets() {
		t.Run(tg.Name, func(t *testing.T) {
			env := testutil.Start(t, tg)
			w := env.World(t, world.Config{})
			js := env.Client.JetStream()
			ctx := testutil.Ctx(t, 30*time.Second)

			data, err := wire.EncodeCursor(wire.Cursor{Seq: 7})
			require.NoError(t, err)
			m := nats.NewMsg(wire.KeySubject(w.Name, wire.CursorKey("a")))
			m.Data = data
			m.Header.Set(jetstream.SequenceHeader, "999999")
			ack, err := js.PublishMsg(ctx, m)
			require.NoError(t, err)

			c, at, err := store.ReadCursor(ctx, w.World, "a")
			require.NoError(t, err)
			require.EqualValues(t, 7, c.Seq)
			require.Equal(t, ack.Sequence, at)
		})
	}
}
