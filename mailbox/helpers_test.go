package mailbox_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// newWorld makes a fresh world with small message limits (so that the byte
// limit leaves room for many messages) and a drainer with quick backoff,
// to dead-letter with. The world's Mailboxes is the Admin under test.
func newWorld(t *testing.T, env *testutil.Env, cfg world.Config, opts ...drain.Option) (*client.World, *drain.Drainer) {
	t.Helper()
	if cfg.MaxMsgSize == 0 {
		cfg.MaxMsgSize = 8 << 10
	}
	w := env.World(t, cfg)
	d, err := drain.New(w.World, w.Ownership, append([]drain.Option{drain.WithBackoff(time.Millisecond, 10*time.Millisecond)}, opts...)...)
	require.NoError(t, err)
	return w, d
}

var (
	send   = testutil.Send
	stored = testutil.Stored
	raw    = testutil.Publish
)
