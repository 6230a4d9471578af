package queue_test

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/queue"
)

func TestValidate(t *testing.T) {
	require.NoError(t, queue.ValidateFrom(""))
	require.NoError(t, queue.ValidateFrom("billing service ü"))
	require.ErrorIs(t, queue.ValidateFrom("a\r\nNats-Msg-Id: x"), queue.ErrInvalidMessage)
	require.ErrorIs(t, queue.ValidateFrom(strings.Repeat("x", queue.MaxFromBytes+1)), queue.ErrInvalidMessage)
	require.ErrorIs(t, queue.ValidateMsgID(""), queue.ErrInvalidMessage)
	require.ErrorIs(t, queue.ValidateMsgID("a b"), queue.ErrInvalidMessage)
	require.NoError(t, queue.ValidateMsgID("order-42/retry"))
	require.NoError(t, queue.ValidateHeader("Trace-Id", "abc"))
	for _, k := range []string{"", "Nats-Msg-Id", "nats-expected-stream", "Fencepost-From", "a b", "a:b", "é", "Status", "Description"} {
		require.ErrorIs(t, queue.ValidateHeader(k, "v"), queue.ErrInvalidMessage, k)
	}
	require.ErrorIs(t, queue.ValidateHeader("K", "v\n"), queue.ErrInvalidMessage)
}

func TestUserHeaders(t *testing.T) {
	h := nats.Header{"Fencepost-From": {"x"}, "Nats-Sequence": {"1"}, "Trace-Id": {"t"}, "Status": {"204"}}
	require.Equal(t, nats.Header{"Trace-Id": {"t"}}, queue.UserHeaders(h))
	require.NotNil(t, queue.UserHeaders(nil))
}

// TestReservedFold: UserHeaders drops a header exactly when its name's
// lower case starts with a reserved prefix, as the ToLower comparison it
// replaced did, for names in any case and with runes outside ASCII whose
// lower case is ASCII (FuzzUserHeaders tries others).
func TestReservedFold(t *testing.T) {
	for _, k := range []string{"NATS-Sequence", "nAtS-x", "Nats-", "Nats", "FENCEPOST-From", "fencepost-", "Fencepost", "\u212aey", "\u0130d", "Nat\u017f-x", "N\u0101ts-x", "Trace-Id", ""} {
		t.Run(k, func(t *testing.T) { checkUserHeader(t, k) })
	}
}

// FuzzUserHeaders: see TestReservedFold.
func FuzzUserHeaders(f *testing.F) {
	for _, k := range []string{"Nats-Msg-Id", "fencepost-from", "\u212a", "Trace-Id", "Status"} {
		f.Add(k)
	}
	f.Fuzz(checkUserHeader)
}

func checkUserHeader(t *testing.T, k string) {
	lower := strings.ToLower(k)
	dropped := strings.HasPrefix(lower, "nats-") || strings.HasPrefix(lower, "fencepost-") || k == "Status" || k == "Description"
	got := queue.UserHeaders(nats.Header{k: {"v"}})
	if dropped {
		require.Empty(t, got, "%q", k)
	} else {
		require.Equal(t, nats.Header{k: {"v"}}, got, "%q", k)
	}
}

// BenchmarkUserHeaders: a delivered message's headers, as a producer with
// a sender and a message id stores them.
func BenchmarkUserHeaders(b *testing.B) {
	h := nats.Header{"Fencepost-From": {"svc"}, "Nats-Msg-Id": {"m-1"}, "Trace-Id": {"t"}}
	b.ReportAllocs()
	for b.Loop() {
		queue.UserHeaders(h)
	}
}

// FuzzValidateHeader: what the validator accepts survives the NATS header
// encoding unchanged, and never smuggles in a reserved header.
func FuzzValidateHeader(f *testing.F) {
	f.Add("Trace-Id", "abc")
	f.Add("Nats-Msg-Id", "x")
	f.Add("K", "v\r\nNats-Expected-Stream: y")
	f.Fuzz(func(t *testing.T, key, value string) {
		if err := queue.ValidateHeader(key, value); err != nil {
			require.ErrorIs(t, err, queue.ErrInvalidMessage)
			return
		}
		require.True(t, utf8.ValidString(value))
		require.NotContains(t, value, "\r")
		require.NotContains(t, value, "\n")
		require.NotContains(t, key, ":")
		require.False(t, strings.HasPrefix(strings.ToLower(key), "nats-"))
		require.False(t, strings.HasPrefix(strings.ToLower(key), "fencepost-"))
	})
}

// FuzzValidateFrom: an accepted sender has no control characters and fits.
func FuzzValidateFrom(f *testing.F) {
	f.Add("svc")
	f.Add("a\x00b")
	f.Fuzz(func(t *testing.T, from string) {
		if err := queue.ValidateFrom(from); err != nil {
			require.ErrorIs(t, err, queue.ErrInvalidMessage)
			return
		}
		require.LessOrEqual(t, len(from), queue.MaxFromBytes)
		require.False(t, strings.ContainsAny(from, "\r\n\x00"))
	})
}

// FuzzValidateMsgID: an accepted message id is 1 to MaxMsgIDBytes of
// UTF-8 without spaces or control characters (it is a header value and a
// dedupe key); a refused one wraps ErrInvalidMessage and says "message id".
func FuzzValidateMsgID(f *testing.F) {
	for _, s := range []string{"order-42/retry", "", "a b", "a\u00a0b", "a\r\nNats-Expected-Stream: x", "\xff", strings.Repeat("x", queue.MaxMsgIDBytes+1), "日本"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		err := queue.ValidateMsgID(id)
		valid := id != "" && len(id) <= queue.MaxMsgIDBytes && utf8.ValidString(id) &&
			!strings.ContainsFunc(id, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) })
		if valid != (err == nil) {
			t.Fatalf("ValidateMsgID(%q) = %v, want valid=%v", id, err, valid)
		}
		if err != nil {
			require.ErrorIs(t, err, queue.ErrInvalidMessage)
			require.Contains(t, err.Error(), "message id")
		}
	})
}
