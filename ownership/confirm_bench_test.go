package ownership_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/server/servertest"
	"github.com/fencepost/fencepost/world"
)

// BenchmarkReadAnswersR3 measures what a read barrier costs an answer
// decided on a read, on an embedded 3-node cluster (one process, TCP
// loopback), an R3 world against an R3 raw KV bucket in the same run:
// LeaderGet (the read alone), Owner (the read and its barrier), KVUpdate
// (a replicated conditional write, which a barrier is), ClaimRefused (a
// claim answered held-by: a cached view, a read, a barrier).
//
//	go test -run '^$' -bench ReadAnswersR3 ./ownership/
func BenchmarkReadAnswersR3(b *testing.B) {
	cl := servertest.NewCluster(b, 3)
	c, err := client.Connect(cl.URL(), client.WithTimeout(10*time.Second))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	var w *client.World
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if w, err = c.CreateWorld(ctx, "bench", world.Config{Replicas: 3}); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		b.Fatal(err)
	}
	raw, err := c.JetStream().CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "raw", History: 1, Replicas: 3})
	if err != nil {
		b.Fatal(err)
	}
	s := w.Ownership
	if _, err := s.Claim(ctx, "g", "node-a", time.Hour); err != nil {
		b.Fatal(err)
	}
	val := []byte(`{"v":1}`)
	rev, err := raw.Create(ctx, "g", val)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("LeaderGet", func(b *testing.B) {
		for b.Loop() {
			if _, err := jsapi.LeaderGet(ctx, c.Conn(), wire.BucketStream(w.Name), jsapi.GetRequest{LastFor: wire.RecordSubject(w.Name, "g")}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Owner", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.Owner(ctx, "g"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("KVUpdate", func(b *testing.B) {
		for b.Loop() {
			// An R3 leader may refuse (10164) a write sent right after the
			// answer to the one before, as still in flight: send it again.
			for try := 1; ; try++ {
				var r uint64
				if r, err = raw.Update(ctx, "g", val, rev); err == nil {
					rev = r
					break
				}
				if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) || try == 10 {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("ClaimRefused", func(b *testing.B) {
		n := ownership.Barriers(s)
		for b.Loop() {
			var held *ownership.HeldError
			if _, err := s.Claim(ctx, "g", "node-b", time.Hour); !errors.As(err, &held) {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(ownership.Barriers(s)-n)/float64(b.N), "barriers/op")
	})
}
