package jsapi_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/server/servertest"
	"github.com/fencepost/fencepost/testkit/faults"
)

// cutStream starts a server, connects to it through a proxy that can cut
// the connection, and makes stream S (subjects s.>, direct gets) holding
// one message, "a" on s.x; the context ends with the test or after a
// minute.
func cutStream(t *testing.T) (*faults.Proxy, *nats.Conn, context.Context) {
	t.Helper()
	node := servertest.New(t)
	p, err := faults.NewProxy(strings.TrimPrefix(node.ClientURL(), "nats://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	nc, js := servertest.Connect(t, p.URL())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, AllowDirect: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "s.x", []byte("a")); err != nil {
		t.Fatal(err)
	}
	return p, nc, ctx
}

// TestDirectGet_EndsAtADrop: a read whose answer is lost whole with the
// connection (cut by a proxy as the answer's first bytes pass) ends when
// the connection drops, with ErrIncomplete, not at its deadline: ownership's
// batched record reads wait up to jsapi.Timeout (5 s) and hold up every
// holding of their process meanwhile. Without nextDrop each round waits
// the whole 10 s and fails with the deadline. After each drop the
// connection comes back and a read gets its answer again.
func TestDirectGet_EndsAtADrop(t *testing.T) {
	p, nc, ctx := cutStream(t)
	read := func() (jsapi.Batch, error) {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return jsapi.DirectGet(rctx, nc, "S", jsapi.GetRequest{Seq: 1, NextFor: "s.x", Batch: 1})
	}
	for round := range 5 {
		if b, err := read(); err != nil || len(b.Msgs) != 1 {
			t.Fatalf("round %d: a read on a connection that stays: %d messages, %v", round, len(b.Msgs), err)
		}
		p.CutAfter(1) // the answer and all after it are lost
		_, err := read()
		if !errors.Is(err, jsapi.ErrIncomplete) {
			t.Fatalf("round %d: a read whose answer was lost with the connection: %v; want jsapi.ErrIncomplete at the drop", round, err)
		}
		for !nc.IsConnected() {
			if ctx.Err() != nil {
				t.Fatal("the connection did not come back")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if p.Cut.Load() != 5 {
		t.Fatalf("%d cuts, want 5", p.Cut.Load())
	}
}

// TestReadsOfOneMessage_EndAtADrop: DirectLast and LeaderGet (nats.go's
// requests, through its shared reply subscription) end when the
// connection drops with their answer lost, with ErrIncomplete, as
// DirectGet does, not at their deadline: an ownership record read of a
// claim, a drain lock's read, waited 5 s after every cut. Without
// request's end at the drop each round waits the whole 10 s and fails
// with the deadline.
func TestReadsOfOneMessage_EndAtADrop(t *testing.T) {
	p, nc, ctx := cutStream(t)
	reads := map[string]func(context.Context) (*jetstream.RawStreamMsg, error){
		"DirectLast": func(ctx context.Context) (*jetstream.RawStreamMsg, error) {
			return jsapi.DirectLast(ctx, nc, "S", "s.x")
		},
		"LeaderGet": func(ctx context.Context) (*jetstream.RawStreamMsg, error) {
			return jsapi.LeaderGet(ctx, nc, "S", jsapi.GetRequest{LastFor: "s.x"})
		},
	}
	cuts := int64(0)
	for name, read := range reads {
		for round := range 3 {
			rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
			if m, err := read(rctx); err != nil || string(m.Data) != "a" {
				t.Fatalf("%s, round %d: a read on a connection that stays: %v", name, round, err)
			}
			p.CutAfter(1) // the answer and all after it are lost
			_, err := read(rctx)
			rcancel()
			cuts++
			if !errors.Is(err, jsapi.ErrIncomplete) {
				t.Fatalf("%s, round %d: a read whose answer was lost with the connection: %v; want jsapi.ErrIncomplete at the drop", name, round, err)
			}
			for !nc.IsConnected() {
				if ctx.Err() != nil {
					t.Fatal("the connection did not come back")
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
	if p.Cut.Load() != cuts {
		t.Fatalf("%d cuts, want %d", p.Cut.Load(), cuts)
	}
	// A read whose caller's context ends first keeps the caller's error.
	dctx, dcancel := context.WithCancel(ctx)
	dcancel()
	if _, err := jsapi.DirectLast(dctx, nc, "S", "s.x"); !errors.Is(err, context.Canceled) || errors.Is(err, jsapi.ErrIncomplete) {
		t.Fatalf("a read with its context cancelled: %v; want context.Canceled", err)
	}
}

// TestDirectGet_DropWatchEndsWithTheConnection: the goroutine that follows
// a connection's drops ends, and forgets the connection, once it closes.
func TestDirectGet_DropWatchEndsWithTheConnection(t *testing.T) {
	nc, _ := servertest.Connect(t, servertest.New(t).ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// No stream: the read is answered with no responders, after the watch
	// was set up.
	_, _ = jsapi.DirectGet(ctx, nc, "NONE", jsapi.GetRequest{Seq: 1, Batch: 1})
	if !jsapi.Watched(nc) {
		t.Fatal("a read left no watch of its connection")
	}
	nc.Close()
	for jsapi.Watched(nc) {
		if ctx.Err() != nil {
			t.Fatal("the watch of a closed connection is still there")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
