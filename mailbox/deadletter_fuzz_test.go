package mailbox

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/queue"
)

// FuzzDecodeDeadLetter: the dead-letter headers (docs/wire.md "Dead
// letters"). Headers written in the documented formats decode to the
// values written; any header values at all decode without a panic, and
// the sender's own headers never include a reserved one.
func FuzzDecodeDeadLetter(f *testing.F) {
	f.Add(uint64(41), int64(1796072400123456789), 5, "n1", uint64(7), "handler: timeout", "svc", "Trace-Id", "t", "", "", "", "")
	f.Add(uint64(0), int64(0), 0, "", uint64(0), "", "", "Nats-Msg-Id", "x", "x", "yesterday", "-1", "18446744073709551616")
	f.Add(uint64(1<<63), int64(-1), -1, "ü", uint64(1<<64-1), "a\r\nb", "ü", "fencepost-dead-seq", "9", "+5", "2026-11-29T21:00:00+02:00", "0x10", " 3")
	f.Fuzz(func(t *testing.T, seq uint64, posted int64, deliveries int, node string, epoch uint64, herr, from, key, value, rawSeq, rawPosted, rawDeliveries, rawEpoch string) {
		when := time.Unix(0, posted)
		// As deadLetter writes them.
		h := nats.Header{}
		h.Set(key, value)
		h.Set(queue.HeaderFrom, from)
		h.Set(wire.HeaderDeadSeq, strconv.FormatUint(seq, 10))
		h.Set(wire.HeaderDeadPosted, when.UTC().Format(time.RFC3339Nano))
		h.Set(wire.HeaderDeadDeliveries, strconv.Itoa(deliveries))
		h.Set(wire.HeaderDeadNode, node)
		h.Set(wire.HeaderDeadEpoch, strconv.FormatUint(epoch, 10))
		h.Set(wire.HeaderDeadError, herr)
		died := time.Unix(1796072400, 0)
		dl := decodeDeadLetter("id", &jetstream.RawStreamMsg{Sequence: 9, Header: h, Data: []byte("b"), Time: died})
		if dl.MailboxSeq != seq || !dl.Posted.Equal(when) || dl.Deliveries != deliveries || dl.Node != node || dl.Epoch != epoch ||
			dl.Error != herr || dl.From != from || dl.ID != "id" || dl.Seq != 9 || string(dl.Body) != "b" || !dl.Died.Equal(died) {
			t.Fatalf("decoded %+v from %v", dl, h)
		}
		for k := range dl.Headers {
			lk := strings.ToLower(k)
			if strings.HasPrefix(lk, "nats-") || strings.HasPrefix(lk, "fencepost-") {
				t.Fatalf("reserved header %q among the sender's headers %v", k, dl.Headers)
			}
		}
		if lk := strings.ToLower(key); !strings.HasPrefix(lk, "nats-") && !strings.HasPrefix(lk, "fencepost-") && key != "Status" && key != "Description" {
			if got := dl.Headers.Get(key); got != value {
				t.Fatalf("the sender's header %q = %q came back as %q", key, value, got)
			}
		}

		// Any values at all: no panic, and a value that does not parse
		// reads as zero rather than as something else.
		h = nats.Header{}
		h.Set(wire.HeaderDeadSeq, rawSeq)
		h.Set(wire.HeaderDeadPosted, rawPosted)
		h.Set(wire.HeaderDeadDeliveries, rawDeliveries)
		h.Set(wire.HeaderDeadEpoch, rawEpoch)
		dl = decodeDeadLetter("id", &jetstream.RawStreamMsg{Header: h})
		if n, err := strconv.ParseUint(rawSeq, 10, 64); err != nil && dl.MailboxSeq != 0 || err == nil && dl.MailboxSeq != n {
			t.Fatalf("Fencepost-Dead-Seq %q read as %d", rawSeq, dl.MailboxSeq)
		}
		if n, err := strconv.ParseUint(rawEpoch, 10, 64); err != nil && dl.Epoch != 0 || err == nil && dl.Epoch != n {
			t.Fatalf("Fencepost-Dead-Epoch %q read as %d", rawEpoch, dl.Epoch)
		}
		if n, err := strconv.Atoi(rawDeliveries); err != nil && dl.Deliveries != 0 || err == nil && dl.Deliveries != n {
			t.Fatalf("Fencepost-Dead-Deliveries %q read as %d", rawDeliveries, dl.Deliveries)
		}
		if _, err := time.Parse(time.RFC3339Nano, rawPosted); err != nil && !dl.Posted.IsZero() {
			t.Fatalf("Fencepost-Dead-Posted %q read as %v", rawPosted, dl.Posted)
		}
	})
}
