package testutil

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/fencepost/fencepost/internal/jsapi"
)

// StreamReads are the subjects of the reads of stream that reach the
// server, for a Tap: direct gets (of a sequence, or of a subject's last
// message) and leader reads.
func StreamReads(stream string) []string {
	return []string{jsapi.APIDirectGet + stream, jsapi.APIDirectGet + stream + ".>", jsapi.APIMsgGet + stream}
}

// Tap is a connection of the test's own subscribed to some subjects: it
// sees the requests other clients send there (reads of a stream, say)
// without taking part.
//
// Its subscriptions are synchronous: nats.go's read loop puts each message
// in the subscription's channel before it reads what came after it, the
// flush's PONG included. So once Take's flush returns, every message the
// server sent the tap before it is in the channels. (With a callback the
// message is handed to another goroutine, which may run after the flush
// returned: a count reset after the flush could then take in a message of
// the step before it, as TestHolding_StartFromPosts did in CI.)
type Tap struct {
	nc   *nats.Conn
	subs []*nats.Subscription
}

// NewTap connects to url and subscribes to subjects; it is closed when the
// test ends.
func NewTap(t testing.TB, url string, subjects ...string) *Tap {
	t.Helper()
	nc, err := nats.Connect(url, nats.SyncQueueLen(1<<16))
	if err != nil {
		t.Fatalf("tap: %v", err)
	}
	t.Cleanup(nc.Close)
	tp := &Tap{nc: nc}
	for _, subj := range subjects {
		sub, err := nc.SubscribeSync(subj)
		if err != nil {
			t.Fatalf("tap: subscribe %s: %v", subj, err)
		}
		tp.subs = append(tp.subs, sub)
	}
	if err := nc.Flush(); err != nil {
		t.Fatalf("tap: %v", err)
	}
	return tp
}

// Take returns the subjects of the messages the server sent the tap since
// the last Take (or NewTap), each request once: every message sent before
// the call, and perhaps some sent during it.
func (tp *Tap) Take(t testing.TB) []string {
	t.Helper()
	if err := tp.nc.Flush(); err != nil {
		t.Fatalf("tap: %v", err)
	}
	var got []string
	for _, sub := range tp.subs {
		for {
			m, err := sub.NextMsg(0)
			if errors.Is(err, nats.ErrTimeout) {
				break
			}
			if err != nil {
				t.Fatalf("tap: %s: %v", sub.Subject, err)
			}
			got = append(got, m.Subject)
		}
	}
	return got
}

// Count is len(Take).
func (tp *Tap) Count(t testing.TB) int {
	t.Helper()
	return len(tp.Take(t))
}
