package wire_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/internal/wire"
)

// TestTimer_Names: a timer's subject is its id's token and its key, and
// reads back as both; the fired subject, filters and source destination
// are the world's; keys are checked (given ones may not start with '_',
// fencepost's own may), and any other subject is refused.
func TestTimer_Names(t *testing.T) {
	subj := wire.TimerSubject("w", "order.42", "remind")
	require.Equal(t, "fp.w.tm.b3JkZXIuNDI.remind", subj)
	id, key, err := wire.TimerOf("w", subj)
	require.NoError(t, err)
	require.Equal(t, "order.42", id)
	require.Equal(t, "remind", key)
	require.Equal(t, "fp.w.tf.b3JkZXIuNDI", wire.FiredSubject("w", "order.42"))
	require.Equal(t, "fp.w.tm.*.*", wire.TimerFilter("w"))
	require.Equal(t, "fp.w.tm.b3JkZXIuNDI.*", wire.TimerIDFilter("w", "order.42"))
	require.Equal(t, "fp.w.tf.*", wire.FiredFilter("w"))
	require.Equal(t, "fp.w.mb.{{wildcard(1)}}", wire.FiredDestination("w"))
	require.Equal(t, "FP_TM_w", wire.TimerStream("w"))

	for _, bad := range []string{"fp.w.tm.b3JkZXIuNDI", "fp.v.tm.b3JkZXIuNDI.k", "fp.w.tm.b3JkZXIuNDK.k", "fp.w.tm.YQ.k.l", "fp.w.mb.YQ", "fp.w.tm.YQ."} {
		_, _, err := wire.TimerOf("w", bad)
		require.Error(t, err, bad)
	}
	for _, good := range []string{"k", "K-9_x", strings.Repeat("a", 64)} {
		require.NoError(t, wire.ValidateTimerKey(good), good)
	}
	for _, bad := range []string{"", "_own", "a.b", "a b", "*", ">", "é", strings.Repeat("a", 65)} {
		require.ErrorIs(t, wire.ValidateTimerKey(bad), wire.ErrInvalidTimerKey, bad)
	}
	require.NoError(t, wire.ValidateAnyTimerKey("_own"))
	require.Error(t, wire.ValidateAnyTimerKey("_o.wn"))
	// The reserve grows with what the broker writes into a fired copy.
	require.Greater(t, wire.TimerReserve("w", strings.Repeat("é", 128), "k"), wire.TimerReserve("w", "a", "k")+600)
}
