package drain

import "github.com/fencepost/fencepost/internal/wire"

// SetBeforeCommit installs a hook that runs after a batch was handled and
// before its fenced cursor write: tests land a seize or a renewal exactly
// there.
func SetBeforeCommit(d *Drainer, fn func(id string, c wire.Cursor)) { d.beforeCommit = fn }

// PauseLockRenewal makes d's drains stop renewing their lock, as a paused
// process would.
func PauseLockRenewal(d *Drainer) { d.noRenew = true }
