package drain_test

import (
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/drain"
)

func TestCursor_RoundTripAndRefusals(t *testing.T) {
	for _, c := range []drain.Cursor{
		{Seq: 0},
		{Seq: 41},
		{Seq: 41, Head: 42, Failures: 2, Error: "timeout"},
	} {
		b, err := drain.EncodeCursor(c)
		require.NoError(t, err)
		got, err := drain.DecodeCursor(b)
		require.NoError(t, err)
		c.V = drain.RecordVersion
		require.Equal(t, c, got)
	}
	for _, bad := range []string{
		``, `{}`, `{"v":2,"seq":1}`, `{"v":1,"seq":1,"x":1}`, `{"v":1,"seq":5,"head":5,"failures":1}`,
		`{"v":1,"seq":5,"head":6}`, `{"v":1,"seq":5,"failures":1}`, `{"v":1,"seq":1,"error":"e"}`,
		`{"v":1,"seq":1} {}`, `{"v":1,"seq":-1}`, `{"v":1,"seq":1,"head":2,"failures":-1}`,
	} {
		_, err := drain.DecodeCursor([]byte(bad))
		require.ErrorIs(t, err, drain.ErrCorruptRecord, bad)
	}
}

func TestLock_RoundTripAndRefusals(t *testing.T) {
	l := drain.Lock{Token: "t", Node: "n1", Epoch: 3, Expires: time.Date(2026, 11, 29, 21, 0, 0, 0, time.UTC)}
	b, err := drain.EncodeLock(l)
	require.NoError(t, err)
	got, err := drain.DecodeLock(b)
	require.NoError(t, err)
	l.V = drain.RecordVersion
	require.Equal(t, l, got)
	for _, bad := range []string{
		`{"v":1,"token":"","node":"n","epoch":1,"expires":"2026-11-29T21:00:00Z"}`,
		`{"v":1,"token":"t","node":"","epoch":1,"expires":"2026-11-29T21:00:00Z"}`,
		`{"v":1,"token":"t","node":"n","epoch":0,"expires":"2026-11-29T21:00:00Z"}`,
		`{"v":1,"token":"t","node":"n","epoch":1}`,
		`{"v":3,"token":"t","node":"n","epoch":1,"expires":"2026-11-29T21:00:00Z"}`,
	} {
		_, err := drain.DecodeLock([]byte(bad))
		require.ErrorIs(t, err, drain.ErrCorruptRecord, bad)
	}
}

// FuzzDecodeCursor: the decoder never panics, and whatever it accepts
// encodes and decodes to the same cursor.
func FuzzDecodeCursor(f *testing.F) {
	f.Add([]byte(`{"v":1,"seq":41}`))
	f.Add([]byte(`{"v":1,"seq":41,"head":42,"failures":2,"error":"x"}`))
	f.Add([]byte(`{"v":1,"seq":41,"head":40,"failures":2}`))
	f.Add([]byte(`[1]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := drain.DecodeCursor(data)
		if err != nil {
			require.ErrorIs(t, err, drain.ErrCorruptRecord)
			return
		}
		require.True(t, c.Head == 0 || c.Head > c.Seq)
		b, err := drain.EncodeCursor(c)
		require.NoError(t, err)
		again, err := drain.DecodeCursor(b)
		require.NoError(t, err)
		require.Equal(t, c, again)
	})
}

// FuzzDecodeLock: likewise for the drain lock.
func FuzzDecodeLock(f *testing.F) {
	f.Add([]byte(`{"v":1,"token":"t","node":"n","epoch":1,"expires":"2026-11-29T21:00:00Z"}`))
	f.Add([]byte(`{"v":1,"token":"t","node":"\u00fc","epoch":18446744073709551615,"expires":"2026-11-29T21:00:00.5+02:00"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		l, err := drain.DecodeLock(data)
		if err != nil {
			require.ErrorIs(t, err, drain.ErrCorruptRecord)
			return
		}
		require.True(t, utf8.ValidString(l.Node))
		b, err := drain.EncodeLock(l)
		require.NoError(t, err)
		again, err := drain.DecodeLock(b)
		require.NoError(t, err)
		require.True(t, l.Expires.Equal(again.Expires))
		l.Expires = again.Expires
		require.Equal(t, l, again)
	})
}
