package wire_test

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/fencepost/fencepost/internal/wire"
)

// FuzzValidateWorld: ValidateWorld accepts exactly the names of 1 to 32
// bytes of [A-Za-z0-9_-]; every name it accepts makes stream names
// without the characters JetStream forbids in them and subjects whose
// world part is one token; every refusal wraps ErrInvalidWorld.
func FuzzValidateWorld(f *testing.F) {
	for _, s := range []string{"default", "a", "A_b-9", strings.Repeat("w", 32), strings.Repeat("w", 33), "", "a.b", "a b", "*", ">", "ü", "a/b", "a\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		err := wire.ValidateWorld(name)
		want := name != "" && len(name) <= wire.MaxWorldBytes && strings.Trim(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-") == ""
		if want != (err == nil) {
			t.Fatalf("ValidateWorld(%q) = %v, want valid=%v", name, err, want)
		}
		if err != nil {
			if !errors.Is(err, wire.ErrInvalidWorld) {
				t.Fatalf("ValidateWorld(%q): %v does not wrap ErrInvalidWorld", name, err)
			}
			if name == "" && !strings.Contains(err.Error(), "empty") || name != "" && !strings.Contains(err.Error(), strconv.Quote(name)) {
				t.Fatalf("ValidateWorld(%q): error %q does not name the world", name, err)
			}
			return
		}
		for _, stream := range []string{wire.BucketStream(name), wire.MailboxStream(name)} {
			if strings.ContainsAny(stream, ".*> \t\r\n/\\") {
				t.Fatalf("stream name %q of world %q has a forbidden character", stream, name)
			}
		}
		for _, subj := range []string{wire.MailboxSubject(name, "x"), wire.DeadLetterSubject(name, "x")} {
			toks := strings.Split(subj, ".")
			if len(toks) != 4 || toks[1] != name {
				t.Fatalf("subject %q of world %q does not have the world as its second of four tokens", subj, name)
			}
		}
		if toks := strings.Split(wire.RecordSubject(name, "x"), "."); len(toks) != 4 || toks[1] != wire.Bucket(name) {
			t.Fatalf("record subject %v of world %q", toks, name)
		}
	})
}

// FuzzEncodeRecord: the encoder accepts a record iff the decoder accepts
// its encoding (the encoder refuses what the decoder would), and decoding
// the encoding gives the same record, times as instants in UTC. Ownership
// records and node lease records share this format.
func FuzzEncodeRecord(f *testing.F) {
	f.Add("n1", uint64(7), "held", int64(10000), int64(1796072400000000000), int64(10000000000), uint64(0))
	f.Add("n1", uint64(9), "held", int64(10000), int64(1796072400123456789), int64(1000000000), uint64(4))
	f.Add("n1", uint64(1), "free", int64(0), int64(0), int64(0), uint64(0))
	f.Add("", uint64(1), "free", int64(0), int64(0), int64(0), uint64(3))
	f.Add("", uint64(1), "held", int64(1), int64(1), int64(1), uint64(0))
	f.Add("n\xff", uint64(0), "Held", int64(-1), int64(-1), int64(-1), uint64(1))
	f.Fuzz(func(t *testing.T, node string, epoch uint64, state string, ttl, acquired, life int64, nodeLease uint64) {
		acq := time.Unix(0, acquired).In(time.FixedZone("x", 3600))
		r := wire.Record{Node: node, Epoch: epoch, State: state, TTLms: ttl, Acquired: acq, Expires: acq.Add(time.Duration(life)), NodeLease: nodeLease}
		if acquired == 0 && life == 0 {
			r.Acquired, r.Expires = time.Time{}, time.Time{}
		}
		b, err := wire.EncodeRecord(r)
		if err != nil {
			if !errors.Is(err, wire.ErrCorruptRecord) {
				t.Fatalf("EncodeRecord(%+v): %v does not wrap ErrCorruptRecord", r, err)
			}
			// What the encoder refuses, the decoder refuses too. (JSON
			// cannot carry invalid UTF-8: json.Marshal would replace it.)
			if !utf8.ValidString(node) {
				return
			}
			probe := r
			probe.V = wire.RecordVersion
			if raw, jerr := jsonOf(probe); jerr == nil {
				if _, derr := wire.DecodeRecord(raw); derr == nil {
					t.Fatalf("EncodeRecord refuses %+v (%v) but DecodeRecord accepts %s", r, err, raw)
				}
			}
			return
		}
		got, err := wire.DecodeRecord(b)
		if err != nil {
			t.Fatalf("DecodeRecord(EncodeRecord(%+v)) = %v on %s", r, err, b)
		}
		if got.V != wire.RecordVersion || got.Node != r.Node || got.Epoch != r.Epoch || got.State != r.State || got.TTLms != r.TTLms || got.NodeLease != r.NodeLease ||
			!got.Acquired.Equal(r.Acquired) || !got.Expires.Equal(r.Expires) {
			t.Fatalf("round trip changed %+v into %+v", r, got)
		}
		if got.Acquired.Location() != time.UTC || got.Expires.Location() != time.UTC {
			t.Fatalf("decoded times are not UTC: %+v", got)
		}
		b2, err := wire.EncodeRecord(got)
		if err != nil || string(b2) != string(b) {
			t.Fatalf("re-encoding is not stable: %s then %s (%v)", b, b2, err)
		}
		// A free record is never live nor backed, whatever its expiry.
		if got.State == wire.StateFree && (got.Live(got.Expires.Add(-time.Second)) || got.Backed()) {
			t.Fatalf("free record %+v is live or backed", got)
		}
		// A record backed by a node lease is live only through it.
		if got.Backed() && got.LiveBacked(nil, got.Acquired) {
			t.Fatalf("backed record %+v is live without its node lease", got)
		}
	})
}

// jsonOf is the plain JSON form of r, without the encoder's checks.
func jsonOf(r wire.Record) ([]byte, error) { return json.Marshal(r) }
