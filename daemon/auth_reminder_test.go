package daemon_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/daemon"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/queue"
	"github.com/fencepost/fencepost/testkit/testutil"
)

// TestAuth_OwnerReminderNotPermitted: under --auth no role may write a
// reminder's intent yet (docs/security.md grants owners neither the
// intent keys nor the timer stream): an owner's Remind is refused at once
// as not permitted, and nothing is stored.
func TestAuth_OwnerReminderNotPermitted(t *testing.T) {
	a := startAuthed(t)
	ctx := testutil.Ctx(t, 15*time.Second)
	o := a.as(t, daemon.RoleOwner)
	l, err := o.w.Ownership.Claim(ctx, "a", "node-a", time.Minute)
	require.NoError(t, err)
	subj := wire.ReminderSubject("default", "a", "k")
	o.refused(t, "a reminder's intent", subj, func(ctx context.Context) error {
		_, err := o.w.Queue.Remind(ctx, l.Fence, "a", []byte("x"), queue.WithAfter(time.Second), queue.WithTimerKey("k"))
		return err
	})
	op := a.as(t, daemon.RoleOperator)
	_, err = jsapi.LeaderGet(ctx, handles.Of(op.w).JS.Conn(), wire.BucketStream("default"), jsapi.GetRequest{LastFor: subj})
	require.ErrorIs(t, err, jsapi.ErrNotFound, "no intent stored")
}
