package jsapi_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/server/servertest"
)

// TestLastReads: reads asked for at once share multi-last direct gets and
// each gets what a read of its own (DirectLast) gets: the subject's last
// message, or nil where it has none; 2,500 reads (more than one request
// can carry) take a few requests. A caller whose context ends stops
// waiting with its error.
func TestLastReads(t *testing.T) {
	nc, js := servertest.Connect(t, servertest.New(t).ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, AllowDirect: true}); err != nil {
		t.Fatal(err)
	}
	const n = 2500
	for i := range n {
		for j := range i % 3 { // none, one, two messages
			if _, err := js.Publish(ctx, fmt.Sprintf("s.%d", i), fmt.Appendf(nil, "%d", j)); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The requests, seen by a synchronous subscription: nats.go's read
	// loop queues each in it before reading on, so after the flush below
	// every request sent before it is counted (a callback might run later).
	requests, err := nc.SubscribeSync(jsapi.APIDirectGet + "S")
	if err != nil {
		t.Fatal(err)
	}
	lr := jsapi.NewLastReads(nc, "S")
	got := make([]*jetstream.RawStreamMsg, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { got[i], errs[i] = lr.Read(ctx, fmt.Sprintf("s.%d", i)) })
	}
	wg.Wait()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	r, _, err := requests.Pending()
	if err != nil {
		t.Fatal(err)
	}
	if r < 3 || r > 100 {
		t.Fatalf("%d reads at once took %d requests; want at least 3 (1,000 subjects each at most) and far fewer than %d", n, r, n)
	}
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("s.%d: %v", i, errs[i])
		}
		want, err := jsapi.DirectLast(ctx, nc, "S", fmt.Sprintf("s.%d", i))
		if errors.Is(err, jsapi.ErrNotFound) {
			if got[i] != nil {
				t.Fatalf("s.%d has no message; read %d", i, got[i].Sequence)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if got[i] == nil || got[i].Sequence != want.Sequence || string(got[i].Data) != string(want.Data) {
			t.Fatalf("s.%d: read %v, want its last message %d", i, got[i], want.Sequence)
		}
	}

	done, stop := context.WithCancel(ctx)
	stop()
	if _, err := lr.Read(done, "s.1"); !errors.Is(err, context.Canceled) {
		t.Fatalf("a read whose context ended: %v", err)
	}
}
