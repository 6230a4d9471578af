package jsapi_test

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/server/servertest"
)

// TestPublishBatch: a batch is stored whole, its answer the last message's
// sequence; one of no messages or more than 1,000 is refused unsent; a
// stream without allow_atomic refuses it (ErrAtomicDisabled) and stores
// nothing; an expected check that fails refuses the whole batch.
func TestPublishBatch(t *testing.T) {
	srv := servertest.New(t)
	_, js := servertest.Connect(t, srv.ClientURL())
	ctx := context.Background()
	mk := func(n int, subj string) []*nats.Msg {
		var out []*nats.Msg
		for i := range n {
			m := nats.NewMsg(subj + "." + strconv.Itoa(i))
			m.Data = []byte("v")
			out = append(out, m)
		}
		return out
	}
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "A", Subjects: []string{"a.>"}, AllowAtomicPublish: true})
	if err != nil {
		t.Fatal(err)
	}
	ack, err := jsapi.PublishBatch(ctx, js, mk(3, "a"))
	if err != nil || ack.Sequence != 3 {
		t.Fatalf("stored %v, %v: want the third message's sequence", ack, err)
	}
	for _, n := range []int{0, jsapi.MaxAtomicBatch + 1} {
		if _, err := jsapi.PublishBatch(ctx, js, mk(n, "a")); err == nil {
			t.Errorf("a batch of %d was sent", n)
		}
	}
	// An expected check that fails refuses every message.
	msgs := mk(3, "a")
	msgs[1].Header.Set(jetstream.ExpectedLastSubjSeqHeader, "99")
	_, err = jsapi.PublishBatch(ctx, js, msgs)
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequence {
		t.Fatalf("a failed check: %v", err)
	}
	info, err := s.Info(ctx)
	if err != nil || info.State.Msgs != 3 {
		t.Fatalf("after the refused batch %d messages (%v), want 3", info.State.Msgs, err)
	}

	b, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "B", Subjects: []string{"b.>"}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = jsapi.PublishBatch(ctx, js, mk(2, "b"))
	if !errors.Is(err, jsapi.ErrAtomicDisabled) || !jsapi.IsAtomicDisabled(err) {
		t.Fatalf("a stream without allow_atomic: %v", err)
	}
	if info, err := b.Info(ctx); err != nil || info.State.Msgs != 0 {
		t.Fatalf("a refused batch stored %d messages (%v)", info.State.Msgs, err)
	}
}
