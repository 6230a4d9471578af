package testutil

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/queue"
)

// Send posts each of bodies to id's mailbox, from "tester".
func Send(t testing.TB, ctx context.Context, w *client.World, id string, bodies ...string) {
	t.Helper()
	for _, b := range bodies {
		if _, err := w.Queue.Send(ctx, id, []byte(b), queue.WithFrom("tester")); err != nil {
			t.Fatalf("send to %q: %v", id, err)
		}
	}
}

// Stored is the number of messages stored on subj in w's mailbox stream
// (committed ones whose purge ran are gone).
func Stored(t testing.TB, w *client.World, subj string) uint64 {
	t.Helper()
	info, err := handles.Of(w).Mailbox.Info(context.Background(), jetstream.WithSubjectFilter(subj))
	if err != nil {
		t.Fatalf("stream info of %s: %v", subj, err)
	}
	return info.State.Subjects[subj]
}

// Publish publishes body on subj as a producer that knows only
// docs/wire.md would, with the headers hdr (name, value, name, value...,
// as sent: no case folding), and returns the message's sequence.
func Publish(t testing.TB, ctx context.Context, w *client.World, subj, body string, hdr ...string) uint64 {
	t.Helper()
	m := nats.NewMsg(subj)
	m.Data = []byte(body)
	for i := 0; i+1 < len(hdr); i += 2 {
		m.Header[hdr[i]] = append(m.Header[hdr[i]], hdr[i+1])
	}
	ack, err := handles.Of(w).JS.PublishMsg(ctx, m)
	if err != nil {
		t.Fatalf("publish on %s: %v", subj, err)
	}
	return ack.Sequence
}
