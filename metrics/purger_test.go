package metrics_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/metrics"
)

func TestPurger(t *testing.T) {
	var nilP *metrics.Purger
	nilP.BadCursorKey("w")
	nilP.ForgedCursor("w")

	reg := prometheus.NewRegistry()
	p := metrics.NewPurger(reg)
	p.BadCursorKey("w")
	metrics.NewPurger(reg).ForgedCursor("w") // shares the registered counters
	p.ForgedCursor("w")
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP fencepost_purger_bad_cursor_keys_total Cursor key revisions the purger refused because the key's token is no id's canonical encoding (e.g. a literal c.*); nothing was purged for them, a WARN names the key.
# TYPE fencepost_purger_bad_cursor_keys_total counter
fencepost_purger_bad_cursor_keys_total{world="w"} 1
# HELP fencepost_purger_forged_cursors_total Cursor revisions the purger refused because their seq is above the mailbox stream's last sequence; nothing was purged, the key was restored or deleted, a WARN names it.
# TYPE fencepost_purger_forged_cursors_total counter
fencepost_purger_forged_cursors_total{world="w"} 2
`)))
}
