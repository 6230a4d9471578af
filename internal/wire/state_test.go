package wire_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/internal/wire"
)

func TestStateKey_Validate(t *testing.T) {
	for _, k := range []string{"a", "balance", "A-Z_09", strings.Repeat("k", wire.MaxStateKeyBytes)} {
		require.NoError(t, wire.ValidateStateKey(k), k)
	}
	for _, k := range []string{"", "a.b", "*", ">", "a b", "é", "a/b", strings.Repeat("k", wire.MaxStateKeyBytes+1), "x\x00"} {
		err := wire.ValidateStateKey(k)
		require.Error(t, err, "%q", k)
		require.True(t, errors.Is(err, wire.ErrInvalidState), "%v", err)
	}
	require.NoError(t, wire.ValidateStateValue("k", make([]byte, wire.MaxStateValueBytes)))
	err := wire.ValidateStateValue("k", make([]byte, wire.MaxStateValueBytes+1))
	require.ErrorIs(t, err, wire.ErrInvalidState)
	require.Contains(t, err.Error(), "16385 bytes, the limit is 16384")
}

func TestStateKey_RoundTrip(t *testing.T) {
	for _, id := range []string{"a", "order.42", "*", "日本"} {
		subj := wire.KeySubject("w1", wire.StateKey(id, "count"))
		key, err := wire.StateKeyOf("w1", id, subj)
		require.NoError(t, err)
		require.Equal(t, "count", key)
		// The filter matches it, and no other id's state.
		f := wire.StateFilter("w1", id)
		require.True(t, strings.HasPrefix(subj, strings.TrimSuffix(f, ">")), "%s %s", subj, f)
		_, err = wire.StateKeyOf("w1", id+"x", subj)
		require.ErrorIs(t, err, wire.ErrInvalidState)
	}
	_, err := wire.StateKeyOf("w1", "a", wire.KeySubject("w1", wire.CursorKey("a")))
	require.ErrorIs(t, err, wire.ErrInvalidState)
}
