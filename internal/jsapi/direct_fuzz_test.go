package jsapi

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// FuzzRawFromDirect: a message of a batched direct get, as the server
// sends it (Nats-Sequence, Nats-Time-Stamp, Nats-Subject headers). Values
// in the server's formats read back as written; any other values are
// refused with an error quoting the bad header, never read as something
// else.
func FuzzRawFromDirect(f *testing.F) {
	f.Add(uint64(42), int64(1796072400123456789), "fp.w.mb.YQ", []byte("body"), "42", "2026-11-29T21:00:00.123456789Z")
	f.Add(uint64(0), int64(0), "", []byte{}, "", "")
	f.Add(uint64(1<<64-1), int64(-1), "x", []byte{0}, "18446744073709551616", "2026-11-29T21:00:00+02:00")
	f.Add(uint64(1), int64(1), "x", []byte{}, "-1", "yesterday")
	f.Fuzz(func(t *testing.T, seq uint64, ts int64, subj string, data []byte, rawSeq, rawTS string) {
		when := time.Unix(0, ts).UTC()
		m := &nats.Msg{Header: nats.Header{}, Data: data}
		m.Header.Set(jetstream.SequenceHeader, strconv.FormatUint(seq, 10))
		m.Header.Set(jetstream.TimeStampHeaer, when.Format(time.RFC3339Nano))
		m.Header.Set(jetstream.SubjectHeader, subj)
		sm, err := RawFromDirect(m)
		if err != nil {
			t.Fatalf("RawFromDirect of seq %d, time %v: %v", seq, when, err)
		}
		if sm.Sequence != seq || !sm.Time.Equal(when) || sm.Subject != subj || string(sm.Data) != string(data) {
			t.Fatalf("read %+v from seq %d, time %v, subject %q", sm, seq, when, subj)
		}

		m.Header.Set(jetstream.SequenceHeader, rawSeq)
		m.Header.Set(jetstream.TimeStampHeaer, rawTS)
		sm, err = RawFromDirect(m)
		wantSeq, seqErr := strconv.ParseUint(rawSeq, 10, 64)
		wantTS, tsErr := time.Parse(time.RFC3339Nano, rawTS)
		switch {
		case seqErr != nil || tsErr != nil:
			if err == nil {
				t.Fatalf("RawFromDirect accepted sequence %q, time %q as %+v", rawSeq, rawTS, sm)
			}
			if bad := map[bool]string{true: rawSeq, false: rawTS}[seqErr != nil]; !strings.Contains(err.Error(), strconv.Quote(bad)) {
				t.Fatalf("error %q does not quote the bad header %q", err, bad)
			}
		case err != nil:
			t.Fatalf("RawFromDirect refused sequence %q, time %q: %v", rawSeq, rawTS, err)
		case sm.Sequence != wantSeq || !sm.Time.Equal(wantTS):
			t.Fatalf("sequence %q, time %q read as %d, %v", rawSeq, rawTS, sm.Sequence, sm.Time)
		}
	})
}
