package wire

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Every record the ownership code writes takes the plain form both ways
// (else the fast path would be dead code), and the plain form's bytes and
// values are encoding/json's.
func TestPlainRecord_TakenForWhatIsWritten(t *testing.T) {
	at := time.Date(2026, 12, 2, 16, 0, 0, 123456789, time.FixedZone("x", -7*3600))
	for _, r := range []Record{
		{Node: "node-1", Epoch: 7, State: StateHeld, TTLms: 10000, Acquired: at, Expires: at.Add(10 * time.Second)},
		{Node: "node-1", Epoch: 8, State: StateHeld, TTLms: 1000, Acquired: at, Expires: at.Add(time.Second), NodeLease: 42},
		{Node: "n", Epoch: 1<<64 - 1, State: StateFree, TTLms: 0},
		{Node: "owner 3 (rack b)", Epoch: 2, State: StateHeld, TTLms: 1<<63 - 1, Acquired: at.Truncate(time.Second), Expires: at.Add(time.Hour).Truncate(time.Second)},
	} {
		b, err := EncodeRecord(r)
		require.NoError(t, err)
		r.V, r.Acquired, r.Expires = RecordVersion, r.Acquired.UTC(), r.Expires.UTC()
		want, err := json.Marshal(r)
		require.NoError(t, err)
		require.Equal(t, string(want), string(b))
		got, ok := decodePlainRecord(b)
		require.True(t, ok, "%s not read in the plain form", b)
		var slow Record
		require.True(t, decodeOnce(b, &slow))
		require.Equal(t, slow, got)
		dec, err := DecodeRecord(b)
		require.NoError(t, err)
		require.Equal(t, slow, dec)
	}
}

// What is not in the plain form is left to encoding/json, which decides
// as it did before the plain form: some of it is a record all the same.
func TestPlainRecord_OtherFormsLeftToJSON(t *testing.T) {
	const tail = `"epoch":7,"state":"held","ttl_ms":10000,"acquired":"2026-11-29T21:00:00Z","expires":"2026-11-29T21:00:10Z"}`
	for _, c := range []struct {
		data   string
		record bool // encoding/json reads a valid record
	}{
		{`{"v":1,"node":"n\u00fc",` + tail, true},          // an escape
		{`{"v":1,"node":"nü",` + tail, true},               // UTF-8 beyond ASCII
		{`{"v":1, "node":"n",` + tail, true},               // white space
		{`{"V":1,"node":"n",` + tail, true},                // a key in another case
		{`{"node":"n","v":1,` + tail, true},                // another order
		{`{"v":1,"node":"n",` + tail + "\n", true},         // a trailing newline
		{`{"v":1,"node":"n","epoch":07` + tail[9:], false}, // a leading zero
		{`{"v":1,"node":"n","epoch":18446744073709551616` + tail[9:], false},
		{`{"v":1,"node":"n",` + tail[:len(tail)-1] + `,"node":"m"}`, true}, // a key twice: the last wins
		{`{"v":2,"node":"n",` + tail, false},
		{`{"v":1,"node":"n\x01",` + tail, false},
		{`{"v":1,"node":"n","epoch":7,"state":"held","ttl_ms":-1,"acquired":"2026-11-29T21:00:00Z","expires":"2026-11-29T21:00:10Z"}`, false},
		{`{"v":1,"node":"n","epoch":7,"state":"held","ttl_ms":9223372036854775808,"acquired":"2026-11-29T21:00:00Z","expires":"2026-11-29T21:00:10Z"}`, false},
		{`{"v":1,"node":"n",` + tail[:len(tail)-1] + `,"node_lease":01}`, false},
	} {
		_, ok := decodePlainRecord([]byte(c.data))
		require.False(t, ok, "%s read in the plain form", c.data)
		_, err := DecodeRecord([]byte(c.data))
		require.Equal(t, c.record, err == nil, "%s: %v", c.data, err)
	}
}

// FuzzPlainRecord: wherever the plain form answers, it answers as
// encoding/json does: the same record from the same bytes, the same bytes
// from the same record.
func FuzzPlainRecord(f *testing.F) {
	f.Add([]byte(`{"v":1,"node":"n","epoch":7,"state":"held","ttl_ms":10000,"acquired":"2026-11-29T21:00:00Z","expires":"2026-11-29T21:00:10Z"}`), "n", uint64(7), "held", int64(10000), int64(0), int64(1e9), uint64(0), 0)
	f.Add([]byte(`{"v":1,"node":"a","epoch":1,"state":"free","ttl_ms":0,"acquired":"0001-01-01T00:00:00Z","expires":"2026-11-29T21:00:10.5+01:00","node_lease":3}`), "a<b", uint64(1), "free", int64(-1), int64(-9e18), int64(1), uint64(3), 3600)
	f.Fuzz(func(t *testing.T, data []byte, node string, epoch uint64, state string, ttl, acq, exp int64, lease uint64, zone int) {
		if r, ok := decodePlainRecord(data); ok {
			var slow Record
			require.True(t, decodeOnce(data, &slow), "plain read %q, encoding/json refuses it", data)
			require.Equal(t, slow, r)
		}
		loc := time.FixedZone("z", zone%(24*3600))
		r := Record{V: RecordVersion, Node: node, Epoch: epoch, State: state, TTLms: ttl, Acquired: time.Unix(0, acq).In(loc), Expires: time.Unix(0, exp).In(loc), NodeLease: lease}
		b, ok := appendPlainRecord(nil, &r)
		want, err := json.Marshal(r)
		if !ok {
			return
		}
		require.NoError(t, err, "plain wrote %s", b)
		require.Equal(t, string(want), string(b))
		got, ok := decodePlainRecord(b)
		// What EncodeRecord writes (a record that validates) is read back
		// the plain way. Of one that does not (a negative ttl_ms, an empty
		// state) the plain reader may decline: encoding/json then
		// decides, and DecodeRecord refuses it either way.
		if r.validate() == nil {
			require.True(t, ok, "plain cannot read what it wrote: %s", b)
		}
		if !ok {
			return
		}
		var slow Record
		require.True(t, decodeOnce(b, &slow))
		require.Equal(t, slow, got)
	})
}

// BenchmarkRecordCodec: a held record as every claim writes it and every
// watch event reads it, through the plain form and through encoding/json.
//
//	go test -run '^$' -bench RecordCodec -benchmem ./internal/wire/
func BenchmarkRecordCodec(b *testing.B) {
	at := time.Date(2026, 12, 2, 16, 0, 0, 123456789, time.UTC)
	r := Record{V: RecordVersion, Node: "owner-3", Epoch: 123456, State: StateHeld, TTLms: 1000, Acquired: at, Expires: at.Add(time.Second), NodeLease: 77}
	data, err := EncodeRecord(r)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("decode/plain", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DecodeRecord(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode/json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var r Record
			if !decodeOnce(data, &r) {
				b.Fatal("refused")
			}
			if err := r.validate(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encode/plain", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := EncodeRecord(r); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encode/json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(r); err != nil {
				b.Fatal(err)
			}
		}
	})
}
