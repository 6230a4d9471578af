package drain

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/server/servertest"
)

// TestReadBatch_UnansweredEndsWithinTimeout: a direct get whose answer
// never comes (a server that crashed after it took the request, as the
// fault runs showed) ends with a deadline error after jsapi.Timeout, even
// under a context without a deadline, so that the drain fails and is
// retried instead of holding its id for ever. The silent responder below
// stands in for the lost answer, which a real server cannot be made to
// lose on demand.
func TestReadBatch_UnansweredEndsWithinTimeout(t *testing.T) {
	node := servertest.New(t)
	nc, _ := servertest.Connect(t, node.ClientURL())
	silent, err := nc.Subscribe(jsapi.APIDirectGet+"SILENT", func(*nats.Msg) {})
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	done := make(chan error, 1)
	go func() {
		_, err := readBatch(context.Background(), nc, "SILENT", "fp.w.mb.YQ", 1, 10)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("read of an unanswered direct get: %v, want a deadline error", err)
		}
		if took := time.Since(start); took < jsapi.Timeout-time.Second {
			t.Fatalf("read gave up after %v, before the timeout %v", took, jsapi.Timeout)
		}
	case <-time.After(3 * jsapi.Timeout):
		t.Fatalf("read of an unanswered direct get still waiting after %v", 3*jsapi.Timeout)
	}
}
