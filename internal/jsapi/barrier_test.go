package jsapi_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/server/servertest"
)

// TestBarrier_StoredOnlyAtTheRevision: a barrier is stored when the
// subject it names is at the expected sequence (0: the subject has no
// message), refused as moved otherwise, and changes nothing of that
// subject; a barrier no stream takes is an error.
func TestBarrier_StoredOnlyAtTheRevision(t *testing.T) {
	for _, tc := range []struct {
		name     string
		replicas int
	}{{"single", 1}, {"cluster-R3", 3}} {
		t.Run(tc.name, func(t *testing.T) {
			var url string
			if tc.replicas == 1 {
				url = servertest.New(t).ClientURL()
			} else {
				url = servertest.NewCluster(t, 3).URL()
			}
			nc, js := servertest.Connect(t, url)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var err error
			for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
				_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, Replicas: tc.replicas, MaxMsgsPerSubject: 1})
				if err == nil || time.Now().After(deadline) {
					break
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			// An R3 leader may answer busy (10164) right after a write it
			// acknowledged, and nothing until the stream has a leader:
			// both are asked again, for up to 10 s.
			check := func(seq uint64, want jsapi.BarrierResult) {
				t.Helper()
				var (
					got jsapi.BarrierResult
					err error
				)
				for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
					got, err = jsapi.Barrier(ctx, js, "S", "s.barrier", "s.rec", seq)
					if err == nil && got != jsapi.BarrierBusy || time.Now().After(deadline) {
						break
					}
				}
				if err != nil {
					t.Fatalf("barrier at %d: %v", seq, err)
				}
				if got != want {
					t.Fatalf("barrier at %d: %v, want %v", seq, got, want)
				}
			}
			check(0, jsapi.BarrierStored) // no message on s.rec yet
			check(1, jsapi.BarrierMoved)
			a, err := js.Publish(ctx, "s.rec", []byte("r"))
			if err != nil {
				t.Fatal(err)
			}
			check(0, jsapi.BarrierMoved)
			check(a.Sequence, jsapi.BarrierStored)
			check(a.Sequence, jsapi.BarrierStored) // again: the barrier keeps one message
			m, err := jsapi.LeaderGet(ctx, nc, "S", jsapi.GetRequest{LastFor: "s.rec"})
			if err != nil || m.Sequence != a.Sequence {
				t.Fatalf("s.rec after the barriers: %v, %v; want it at %d", m, err, a.Sequence)
			}
			info, err := js.Stream(ctx, "S")
			if err != nil {
				t.Fatal(err)
			}
			if n := info.CachedInfo().State.Msgs; n != 2 {
				t.Fatalf("%d messages in the stream, want 2 (s.rec and the last barrier)", n)
			}
			if _, err := jsapi.Barrier(ctx, js, "S", "nobody.barrier", "s.rec", a.Sequence); err == nil {
				t.Fatal("a barrier on a subject of no stream was answered")
			}
		})
	}
}
