package queue_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/queue"
	"github.com/fencepost/fencepost/server/servertest"
	"github.com/fencepost/fencepost/world"
)

// BenchmarkSend compares Send with a raw JetStream publish of the same
// 128-byte payload to a plain file stream on the same server, in the same
// run: the two alternate in chunks of 1,000 messages so that both see the
// same machine state. It reports both rates and their ratio.
//
//	go test -run '^$' -bench Send -benchtime 50000x ./queue/
func BenchmarkSend(b *testing.B) {
	srv := servertest.New(b)
	c, err := client.Connect(srv.ClientURL())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	w, err := c.CreateWorld(ctx, "bench", world.Config{MaxMsgSize: 4096})
	if err != nil {
		b.Fatal(err)
	}
	js := c.JetStream()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "RAW", Subjects: []string{"raw.>"}}); err != nil {
		b.Fatal(err)
	}
	body := make([]byte, 128)
	const window = 256 // messages in flight, async

	b.Run("sync", func(b *testing.B) {
		compare(b, func(n int) error {
			for range n {
				if _, err := js.Publish(ctx, "raw.a", body); err != nil {
					return err
				}
			}
			return nil
		}, func(n int) error {
			for range n {
				if _, err := w.Queue.Send(ctx, "a", body); err != nil {
					return err
				}
			}
			return nil
		})
	})
	b.Run("async", func(b *testing.B) {
		compare(b, func(n int) error {
			fs := make([]jetstream.PubAckFuture, 0, window)
			for i := 0; i < n; i += window {
				fs = fs[:0]
				for j := i; j < min(i+window, n); j++ {
					f, err := js.PublishAsync("raw.b", body)
					if err != nil {
						return err
					}
					fs = append(fs, f)
				}
				for _, f := range fs {
					select {
					case <-f.Ok():
					case err := <-f.Err():
						return err
					}
				}
			}
			return nil
		}, func(n int) error {
			ps := make([]*queue.Pending, 0, window)
			for i := 0; i < n; i += window {
				ps = ps[:0]
				for j := i; j < min(i+window, n); j++ {
					p, err := w.Queue.SendAsync("b", body)
					if err != nil {
						return err
					}
					ps = append(ps, p)
				}
				for _, p := range ps {
					if _, err := p.Wait(ctx); err != nil {
						return err
					}
				}
			}
			return nil
		})
	})
}

// compare runs raw and ours over b.N messages each, alternating in chunks,
// and reports both rates and ours/raw.
func compare(b *testing.B, raw, ours func(n int) error) {
	const chunk = 1000
	var tRaw, tOurs time.Duration
	b.ResetTimer()
	for done := 0; done < b.N; done += chunk {
		n := min(chunk, b.N-done)
		start := time.Now()
		if err := raw(n); err != nil {
			b.Fatal(err)
		}
		tRaw += time.Since(start)
		start = time.Now()
		if err := ours(n); err != nil {
			b.Fatal(err)
		}
		tOurs += time.Since(start)
	}
	rawRate, oursRate := float64(b.N)/tRaw.Seconds(), float64(b.N)/tOurs.Seconds()
	b.ReportMetric(rawRate, "raw-msgs/s")
	b.ReportMetric(oursRate, "fp-msgs/s")
	b.ReportMetric(oursRate/rawRate, "ratio")
}
