package wire

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
)

// The hot-path forms of the ids' tokens, keys and subjects (built on the
// stack) are byte for byte the plain ones: every token of ids of each
// length up to MaxIDBytes and past it, and every non-canonical token
// DecodeID refuses, refused the same way.
func TestHotPathForms(t *testing.T) {
	plain := func(id string) string { return base64.RawURLEncoding.EncodeToString([]byte(id)) }
	for n := 0; n <= MaxIDBytes+3; n++ {
		id := strings.Repeat("é", n/2) + strings.Repeat("x", n%2)
		if n > 2 {
			id = id[:n-2] + "\xff\n" // bytes beyond ASCII and a LF too
		}
		tok := plain(id)
		if got := EncodeID(id); got != tok {
			t.Fatalf("EncodeID of %d bytes: %q, want %q", len(id), got, tok)
		}
		if got := MailboxSubject("w", id); got != "fp.w.mb."+tok {
			t.Fatalf("MailboxSubject: %q", got)
		}
		if got := RecordSubject("w", id); got != KeySubject("w", RecordPrefix+tok) || got != "$KV."+Bucket("w")+".o."+tok {
			t.Fatalf("RecordSubject: %q", got)
		}
		for _, k := range []struct{ got, prefix string }{{RecordKey(id), RecordPrefix}, {CursorKey(id), CursorPrefix}, {LockKey(id), LockPrefix}, {ForceKey(id), ForcePrefix}, {NodeKey(id), NodePrefix}} {
			if k.got != k.prefix+tok {
				t.Fatalf("key %q, want %q", k.got, k.prefix+tok)
			}
		}
		got, err := DecodeID(tok)
		if valid := ValidateID(id) == nil; valid != (err == nil) || valid && got != id {
			t.Fatalf("DecodeID of the token of %d bytes: %q, %v", len(id), got, err)
		}
		if tok, ok := MailboxToken("w", "fp.w.mb."+tok); !ok || tok != plain(id) {
			t.Fatalf("MailboxToken: %q %v", tok, ok)
		}
	}
	for _, tok := range []string{"b3JkZXIuNDI=", "w7w+Pw", "b3JkZXIuNDK", "*", "b3Jk\nZXIuNDI", "b3JkZXIuNDI\r", "_w", "A", strings.Repeat("A", maxIDToken+1)} {
		if id, err := DecodeID(tok); err == nil {
			t.Fatalf("DecodeID(%q) = %q, want an error", tok, id)
		}
	}
	for _, s := range []string{"fp.w.mbx", "fp.ww.mb.x", "fp.w.dl.eA", "fq.w.mb.eA", "fp.w"} {
		if tok, ok := MailboxToken("w", s); ok || tok != s {
			t.Fatalf("MailboxToken(%q) = %q, %v", s, tok, ok)
		}
	}
}

func BenchmarkDecodeID(b *testing.B) {
	tok := EncodeID("order-123456")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeID(tok); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMailboxID(b *testing.B) {
	subj := MailboxSubject("world-one", "order-123456")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := MailboxID("world-one", subj); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRecordSubject(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = RecordSubject("world-one", "order-123456")
	}
}

// EncodeCursor's plain form is json.Marshal's bytes, and decodes back.
func TestEncodeCursorPlain(t *testing.T) {
	for _, seq := range []uint64{0, 1, 9, 10, 1041, 1<<53 + 1, 1<<64 - 1} {
		c := Cursor{Seq: seq}
		got, err := EncodeCursor(c)
		if err != nil {
			t.Fatal(err)
		}
		c.V = RecordVersion
		want, _ := json.Marshal(c)
		if string(got) != string(want) {
			t.Fatalf("EncodeCursor(%d) = %s, want %s", seq, got, want)
		}
		if back, err := DecodeCursor(got); err != nil || back != c {
			t.Fatalf("DecodeCursor(%s) = %+v, %v", got, back, err)
		}
	}
	c := Cursor{Seq: 4, Head: 5, Failures: 2, Error: "timeout"}
	got, err := EncodeCursor(c)
	if c.V = RecordVersion; err != nil || string(got) != `{"v":1,"seq":4,"head":5,"failures":2,"error":"timeout"}` {
		t.Fatalf("EncodeCursor(%+v) = %s, %v", c, got, err)
	}
}

func BenchmarkEncodeCursor(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := EncodeCursor(Cursor{Seq: 123456789}); err != nil {
			b.Fatal(err)
		}
	}
}

// DecodeRecord's one-pass path gives what decodeStrict alone gives (value
// and error) on records and on their corruptions: trailing data, unknown
// fields, other versions, wrong types, duplicate keys.
func TestDecodeRecordOnePass(t *testing.T) {
	slow := func(data []byte) (Record, error) {
		var r Record
		if err := decodeStrict(data, "ownership record", &r); err != nil {
			return Record{}, err
		}
		if err := r.validate(); err != nil {
			return Record{}, err
		}
		return r, nil
	}
	const rec = `{"v":1,"node":"n-1","epoch":3,"state":"held","ttl_ms":5000,"acquired":"2026-01-01T00:00:00Z","expires":"2026-01-01T00:00:05Z","node_lease":2}`
	inputs := []string{
		rec, rec + " \n", rec + "}", rec + "x", rec + rec, " " + rec, "null", "", "{}", `{"v":2}`, `{"v":null}`,
		strings.Replace(rec, `"v":1`, `"v":1.0`, 1), strings.Replace(rec, `"v":1`, `"v":"1"`, 1),
		strings.Replace(rec, `"v":1`, `"v":2`, 1), strings.Replace(rec, `"v":1`, `"v":2,"x":1`, 1),
		strings.Replace(rec, `"v":1`, `"v":1,"x":1`, 1), strings.Replace(rec, `"v":1`, `"v":2,"v":1`, 1),
		strings.Replace(rec, `"v":1`, `"v":1,"v":2`, 1), strings.Replace(rec, `"v":1`, `"V":1`, 1),
		strings.Replace(rec, `"node_lease":2`, `"node_lease":-1`, 1), strings.Replace(rec, `"epoch":3`, `"epoch":0`, 1),
		strings.Replace(rec, `"state":"held"`, `"state":"gone"`, 1), strings.Replace(rec, `"n-1"`, `"n\ud800"`, 1),
		strings.Replace(rec, `,"node_lease":2`, ``, 1),
	}
	for _, r := range []Record{{V: 1, Node: "a", Epoch: 1, State: StateFree}, {V: 1, Node: "é", Epoch: 9, State: StateHeld, TTLms: 1}} {
		b, _ := json.Marshal(r)
		inputs = append(inputs, string(b), string(b)+"\t")
	}
	for _, in := range inputs {
		got, err := DecodeRecord([]byte(in))
		want, werr := slow([]byte(in))
		if got != want || (err == nil) != (werr == nil) || err != nil && err.Error() != werr.Error() {
			t.Fatalf("DecodeRecord(%s) = %+v, %v; decodeStrict: %+v, %v", in, got, err, want, werr)
		}
	}
}
