package server_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/server"
)

// BenchmarkSyncPolicy measures what fsync on every write costs against the
// default (fsync every sync_interval), for a synchronous publish (one in
// flight) and PublishAsync (256 in flight), 128-byte messages, one R1 file
// stream, TCP loopback. docs/operations.md "Sync policy" quotes the figures:
//
//	go test -run '^$' -bench SyncPolicy -benchtime 3s -count 3 ./server/
func BenchmarkSyncPolicy(b *testing.B) {
	policies := []struct {
		name string
		cfg  func(c *server.Config)
	}{
		{"sync=interval-2m", func(c *server.Config) {}},
		{"sync=interval-1s", func(c *server.Config) { c.SyncInterval = time.Second }},
		{"sync=always", func(c *server.Config) { c.SyncAlways = true }},
	}
	for _, p := range policies {
		for _, mode := range []string{"publish", "async"} {
			b.Run(fmt.Sprintf("%s,mode=%s,MsgSz=128b", p.name, mode), func(b *testing.B) {
				cfg := server.Config{StoreDir: b.TempDir(), Port: -1}
				p.cfg(&cfg)
				s, err := server.Start(cfg)
				if err != nil {
					b.Fatal(err)
				}
				defer s.Stop()
				nc, err := nats.Connect(s.ClientURL())
				if err != nil {
					b.Fatal(err)
				}
				defer nc.Close()
				js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(256))
				if err != nil {
					b.Fatal(err)
				}
				ctx := context.Background()
				if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
					b.Fatal(err)
				}
				body := make([]byte, 128)
				b.SetBytes(int64(len(body)))
				b.ResetTimer()
				start := time.Now()
				if mode == "publish" {
					for i := 0; i < b.N; i++ {
						if _, err := js.Publish(ctx, "s.x", body); err != nil {
							b.Fatal(err)
						}
					}
				} else {
					for i := 0; i < b.N; i++ {
						if _, err := js.PublishAsync("s.x", body, jetstream.WithStallWait(30*time.Second)); err != nil {
							b.Fatal(err)
						}
					}
					select {
					case <-js.PublishAsyncComplete():
					case <-time.After(time.Minute):
						b.Fatal("async publishes not acknowledged after a minute")
					}
				}
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
			})
		}
	}
}
