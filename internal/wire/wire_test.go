package wire_test

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/internal/wire"
)

func TestIDCodec_RoundTrip(t *testing.T) {
	for _, id := range []string{"a", "a.b", "*", ">", "a b", "a/b", "日本", strings.Repeat("é", 128), "\x01"} {
		require.NoError(t, wire.ValidateID(id))
		tok := wire.EncodeID(id)
		require.NotContains(t, tok, ".")
		got, err := wire.DecodeID(tok)
		require.NoError(t, err)
		require.Equal(t, id, got)
	}
}

// An id with a NUL byte was accepted, but no command line could name it
// and `work --exec` could never deliver it (FENCEPOST_ID cannot carry a
// NUL): it is refused, with why, and a token that decodes to one is no
// id's (its messages are unroutable).
func TestValidateID_NUL(t *testing.T) {
	for _, id := range []string{"\x00", "a\x00b", "order\x00"} {
		err := wire.ValidateID(id)
		require.ErrorIs(t, err, wire.ErrInvalidID, "%q", id)
		require.ErrorContains(t, err, "NUL")
		require.ErrorContains(t, err, "FENCEPOST_ID")
		_, err = wire.DecodeID(wire.EncodeID(id))
		require.ErrorIs(t, err, wire.ErrInvalidID, "%q", id)
	}
	require.NoError(t, wire.ValidateNode("n\x00"), "a node name keeps its rules")
}

// TestDecodeID_Vectors are the test vectors of docs/wire.md "Ids on the
// wire": the canonical tokens decode, every other spelling is refused (a
// lenient decoder read "b3JkZXIuNDK" as "order.42", so an id was claimed
// for a mailbox it could never drain).
func TestDecodeID_Vectors(t *testing.T) {
	for tok, id := range map[string]string{
		"b3JkZXIuNDI": "order.42",
		"YQ":          "a",
		"YWI":         "ab",
		"YWJj":        "abc",
		"Kg":          "*",
		"5pel5pys":    "日本",
		"Pz8_":        "???",
		"fn5-":        "~~~",
	} {
		require.Equal(t, tok, wire.EncodeID(id), id)
		got, err := wire.DecodeID(tok)
		require.NoError(t, err, tok)
		require.Equal(t, id, got)
	}
	for _, tok := range []string{
		"b3JkZXIuNDI=", // padded
		"b3JkZXIuNDK",  // non-zero trailing bits
		"w7w+Pw",       // standard alphabet, not URL
		"w7w/Pw",       // likewise
		"__8",          // decodes to invalid UTF-8
		"AA",           // decodes to a NUL byte
		"*", ">",       // wildcards
		"",                         // empty
		"Y",                        // length 1 mod 4
		"b3Jk\nZXIuNDI",            // a newline the codec would skip
		strings.Repeat("eHh4", 86), // 258 bytes
		wire.EncodeID(strings.Repeat("x", 256)) + "AA", // too long a token
	} {
		_, err := wire.DecodeID(tok)
		require.ErrorIs(t, err, wire.ErrInvalidID, "%q", tok)
	}
	require.NoError(t, func() error { _, err := wire.DecodeID(wire.EncodeID(strings.Repeat("x", 256))); return err }())
}

func TestScopedMsgID(t *testing.T) {
	require.Equal(t, "b3JkZXIuNDI:k1", wire.ScopedMsgID("order.42", "k1"))
	key, ok := wire.MsgIDKey("order.42", "b3JkZXIuNDI:k1")
	require.True(t, ok)
	require.Equal(t, "k1", key)
	_, ok = wire.MsgIDKey("order.4", "b3JkZXIuNDI:k1")
	require.False(t, ok)
	_, ok = wire.MsgIDKey("order.42", "k1")
	require.False(t, ok)
	require.NotEqual(t, wire.ScopedMsgID("a", "k"), wire.ScopedMsgID("b", "k"))
}

func TestUnroutableSubject(t *testing.T) {
	subj := wire.UnroutableSubject("w")
	require.Equal(t, "fp.w.dl.=unroutable", subj)
	_, err := wire.DecodeID(wire.UnroutableToken)
	require.ErrorIs(t, err, wire.ErrInvalidID)
	tok, ok := wire.MailboxToken("w", "fp.w.mb.YQ")
	require.True(t, ok)
	require.Equal(t, "YQ", tok)
	_, ok = wire.MailboxToken("w", "fp.w.dl.YQ")
	require.False(t, ok)
}

func TestValidateID(t *testing.T) {
	require.ErrorIs(t, wire.ValidateID(""), wire.ErrInvalidID)
	require.ErrorIs(t, wire.ValidateID(strings.Repeat("x", 257)), wire.ErrInvalidID)
	require.NoError(t, wire.ValidateID(strings.Repeat("x", 256)))
	require.ErrorIs(t, wire.ValidateID("\xff"), wire.ErrInvalidID)
}

func TestValidateWorld(t *testing.T) {
	for _, ok := range []string{"default", "a", "A_b-9", strings.Repeat("w", 32)} {
		require.NoError(t, wire.ValidateWorld(ok), ok)
	}
	for _, bad := range []string{"", "a.b", "a b", "*", ">", "ü", strings.Repeat("w", 33), "a/b"} {
		require.ErrorIs(t, wire.ValidateWorld(bad), wire.ErrInvalidWorld, bad)
	}
}

func TestRecord_RoundTripAndStrictness(t *testing.T) {
	now := time.Date(2026, 11, 29, 21, 0, 0, 123, time.UTC)
	r := wire.Record{Node: "n", Epoch: 7, State: wire.StateHeld, TTLms: 10000, Acquired: now, Expires: now.Add(10 * time.Second)}
	b, err := wire.EncodeRecord(r)
	require.NoError(t, err)
	got, err := wire.DecodeRecord(b)
	require.NoError(t, err)
	r.V = wire.RecordVersion
	require.Equal(t, r, got)

	_, err = wire.DecodeRecord([]byte(`{"v":2}`))
	require.ErrorIs(t, err, wire.ErrUnknownVersion)
	_, err = wire.DecodeRecord([]byte(`{"v":1,"node":"n","epoch":1,"state":"held","ttl_ms":1,"acquired":"2026-01-01T00:00:00Z","expires":"2026-01-01T00:00:01Z","extra":1}`))
	require.ErrorIs(t, err, wire.ErrCorruptRecord, "unknown fields are refused, not ignored")
	_, err = wire.DecodeRecord([]byte(`{"v":1,"node":"n","epoch":0,"state":"held"}`))
	require.ErrorIs(t, err, wire.ErrCorruptRecord)
	_, err = wire.EncodeRecord(wire.Record{Node: "", Epoch: 1, State: wire.StateHeld, Expires: now})
	require.ErrorIs(t, err, wire.ErrCorruptRecord, "the encoder refuses what the decoder would")
}

func FuzzIDCodec(f *testing.F) {
	for _, s := range []string{"a", "a.b", "*", ">", " ", "日本", "\xff", "", "a\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		err := wire.ValidateID(id)
		valid := id != "" && len(id) <= wire.MaxIDBytes && utf8.ValidString(id) && !strings.Contains(id, "\x00")
		if valid != (err == nil) {
			t.Fatalf("ValidateID(%q) = %v, want valid=%v", id, err, valid)
		}
		if !valid {
			return
		}
		tok := wire.EncodeID(id)
		if strings.ContainsAny(tok, ".*> \t\r\n") {
			t.Fatalf("token %q of %q is not a single subject token", tok, id)
		}
		got, err := wire.DecodeID(tok)
		if err != nil || got != id {
			t.Fatalf("DecodeID(EncodeID(%q)) = %q, %v", id, got, err)
		}
	})
}

func FuzzDecodeID(f *testing.F) {
	for _, s := range []string{"YQ", "YS5i", "", "!!", "YQ==", "_-_-", "b3JkZXIuNDK", "b3Jk\nZXIuNDI", "__8", "*"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, tok string) {
		id, err := wire.DecodeID(tok)
		if err != nil {
			if !errors.Is(err, wire.ErrInvalidID) {
				t.Fatalf("DecodeID(%q): %v does not wrap ErrInvalidID", tok, err)
			}
			return
		}
		if wire.ValidateID(id) != nil {
			t.Fatalf("DecodeID(%q) returned invalid id %q", tok, id)
		}
		// Canonical only: one token per id, so one subject per mailbox.
		if enc := wire.EncodeID(id); enc != tok {
			t.Fatalf("DecodeID(%q) = %q, whose token is %q", tok, id, enc)
		}
	})
}

func FuzzDecodeRecord(f *testing.F) {
	f.Add([]byte(`{"v":1,"node":"n","epoch":7,"state":"held","ttl_ms":10000,"acquired":"2026-11-29T21:00:00Z","expires":"2026-11-29T21:00:10Z"}`))
	f.Add([]byte(`{"v":1,"node":"n","epoch":7,"state":"free","ttl_ms":0,"acquired":"0001-01-01T00:00:00Z","expires":"0001-01-01T00:00:00Z"}`))
	f.Add([]byte(`{"v":2}`))
	f.Add([]byte(`garbage`))
	f.Add([]byte(`{"v":1}{"v":1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := wire.DecodeRecord(data)
		if err != nil {
			if !errors.Is(err, wire.ErrCorruptRecord) && !errors.Is(err, wire.ErrUnknownVersion) {
				t.Fatalf("error %v is neither corrupt nor unknown version", err)
			}
			return
		}
		// Whatever decodes re-encodes and decodes to the same record.
		b, err := wire.EncodeRecord(r)
		if err != nil {
			t.Fatalf("decoded record %+v does not encode: %v", r, err)
		}
		r2, err := wire.DecodeRecord(b)
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if !r.Acquired.Equal(r2.Acquired) || !r.Expires.Equal(r2.Expires) || r.Node != r2.Node || r.Epoch != r2.Epoch || r.State != r2.State {
			t.Fatalf("round trip changed %+v to %+v", r, r2)
		}
	})
}
