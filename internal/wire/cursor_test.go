package wire_test

import (
	"errors"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/internal/wire"
)

func TestCursor_RoundTripAndRefusals(t *testing.T) {
	for _, c := range []wire.Cursor{
		{Seq: 0},
		{Seq: 41},
		{Seq: 41, Head: 42, Failures: 2, Error: "timeout"},
	} {
		b, err := wire.EncodeCursor(c)
		require.NoError(t, err)
		got, err := wire.DecodeCursor(b)
		require.NoError(t, err)
		c.V = wire.RecordVersion
		require.Equal(t, c, got)
	}
	for _, bad := range []string{
		``, `{}`, `{"v":2,"seq":1}`, `{"v":1,"seq":1,"x":1}`, `{"v":1,"seq":5,"head":5,"failures":1}`,
		`{"v":1,"seq":5,"head":6}`, `{"v":1,"seq":5,"failures":1}`, `{"v":1,"seq":1,"error":"e"}`,
		`{"v":1,"seq":1} {}`, `{"v":1,"seq":-1}`, `{"v":1,"seq":1,"head":2,"failures":-1}`,
	} {
		_, err := wire.DecodeCursor([]byte(bad))
		require.True(t, refused(err), "%s: %v", bad, err)
	}
}

func TestLock_RoundTripAndRefusals(t *testing.T) {
	l := wire.Lock{Token: "t", Node: "n1", Epoch: 3, Expires: time.Date(2026, 11, 29, 21, 0, 0, 0, time.UTC)}
	b, err := wire.EncodeLock(l)
	require.NoError(t, err)
	got, err := wire.DecodeLock(b)
	require.NoError(t, err)
	l.V = wire.RecordVersion
	require.Equal(t, l, got)
	for _, bad := range []string{
		`{"v":1,"token":"","node":"n","epoch":1,"expires":"2026-11-29T21:00:00Z"}`,
		`{"v":1,"token":"t","node":"","epoch":1,"expires":"2026-11-29T21:00:00Z"}`,
		`{"v":1,"token":"t","node":"n","epoch":0,"expires":"2026-11-29T21:00:00Z"}`,
		`{"v":1,"token":"t","node":"n","epoch":1}`,
		`{"v":3,"token":"t","node":"n","epoch":1,"expires":"2026-11-29T21:00:00Z"}`,
	} {
		_, err := wire.DecodeLock([]byte(bad))
		require.True(t, refused(err), "%s: %v", bad, err)
	}
}

// FuzzDecodeCursor: the decoder never panics, and whatever it accepts
// encodes and decodes to the same cursor.
func FuzzDecodeCursor(f *testing.F) {
	f.Add([]byte(`{"v":1,"seq":41}`))
	f.Add([]byte(`{"v":1,"seq":41,"head":42,"failures":2,"error":"x"}`))
	f.Add([]byte(`{"v":1,"seq":41,"head":40,"failures":2}`))
	f.Add([]byte(`[1]`))
	f.Add([]byte(`{"v":1,"seq":18446744073709551615}`))
	f.Add([]byte(`{"v":1,"seq":18446744073709551616}`))
	f.Add([]byte(`{"v":1,"seq":007}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := wire.DecodeCursor(data)
		// The fast path for the plain form and the strict decoder agree.
		strict, serr := wire.DecodeCursorStrict(data)
		require.Equal(t, serr == nil, err == nil, "fast %v, strict %v", err, serr)
		if err == nil {
			require.Equal(t, strict, c)
		}
		if err != nil {
			require.True(t, refused(err), "%v", err)
			return
		}
		require.True(t, c.Head == 0 || c.Head > c.Seq)
		b, err := wire.EncodeCursor(c)
		require.NoError(t, err)
		again, err := wire.DecodeCursor(b)
		require.NoError(t, err)
		require.Equal(t, c, again)
	})
}

// FuzzDecodeLock: likewise for the drain lock.
func FuzzDecodeLock(f *testing.F) {
	f.Add([]byte(`{"v":1,"token":"t","node":"n","epoch":1,"expires":"2026-11-29T21:00:00Z"}`))
	f.Add([]byte(`{"v":1,"token":"t","node":"\u00fc","epoch":18446744073709551615,"expires":"2026-11-29T21:00:00.5+02:00"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		l, err := wire.DecodeLock(data)
		if err != nil {
			require.True(t, refused(err), "%v", err)
			return
		}
		require.True(t, utf8.ValidString(l.Node))
		b, err := wire.EncodeLock(l)
		require.NoError(t, err)
		again, err := wire.DecodeLock(b)
		require.NoError(t, err)
		require.True(t, l.Expires.Equal(again.Expires))
		l.Expires = again.Expires
		require.Equal(t, l, again)
	})
}

// refused says whether err is one of the decoders' refusals: a record of
// another version, or a malformed one.
func refused(err error) bool {
	return errors.Is(err, wire.ErrCorruptRecord) || errors.Is(err, wire.ErrUnknownVersion)
}

func TestForce_RoundTripAndRefusals(t *testing.T) {
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.FixedZone("x", 3600))
	b, err := wire.EncodeForce("ops", at, 30*time.Second)
	require.NoError(t, err)
	f, err := wire.DecodeForce(b)
	require.NoError(t, err)
	require.Equal(t, "ops", f.Node)
	require.True(t, f.At.Equal(at))
	require.Equal(t, "30s", f.TTL)
	_, err = wire.EncodeForce("", at, time.Second)
	require.ErrorIs(t, err, wire.ErrCorruptRecord)
	for _, bad := range []string{`{}`, `{"v":2,"node":"a","at":"2026-01-01T00:00:00Z","ttl":"1s"}`, `{"v":1,"node":"a","at":"2026-01-01T00:00:00Z","ttl":"soon"}`, `{"v":1,"node":"","at":"2026-01-01T00:00:00Z","ttl":"1s"}`, `{"v":1,"node":"a","at":"2026-01-01T00:00:00Z","ttl":"1s","x":1}`} {
		_, err := wire.DecodeForce([]byte(bad))
		require.True(t, refused(err), "%s: %v", bad, err)
	}
}
