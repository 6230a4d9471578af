package ownership_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/server/servertest"
	"github.com/fencepost/fencepost/world"
)

// BenchmarkOps measures claim, guard and renew against the raw KV Create,
// Get and Update they are built on, on one server over TCP loopback, in the
// same run. Compare the pairs: Claim/KVCreate, Guard/KVGet, Renew/KVUpdate.
//
//	go test -run '^$' -bench Ops -benchmem ./ownership/
func BenchmarkOps(b *testing.B) {
	srv := servertest.New(b)
	c, err := client.Connect(srv.ClientURL())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	w, err := c.CreateWorld(ctx, "bench", world.Config{})
	if err != nil {
		b.Fatal(err)
	}
	raw, err := c.JetStream().CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "raw", History: 1})
	if err != nil {
		b.Fatal(err)
	}
	s := w.Ownership
	val := []byte(`{"v":1,"node":"node-a","epoch":1,"state":"held","ttl_ms":60000,"acquired":"2026-11-29T21:00:00Z","expires":"2026-11-29T21:01:00Z"}`)

	var seq int // fresh keys across -count runs
	b.Run("KVCreate", func(b *testing.B) {
		for b.Loop() {
			seq++
			if _, err := raw.Create(ctx, fmt.Sprintf("c.%d", seq), val); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Claim", func(b *testing.B) {
		for b.Loop() {
			seq++
			if _, err := s.Claim(ctx, fmt.Sprintf("claim-%d", seq), "node-a", time.Minute); err != nil {
				b.Fatal(err)
			}
		}
	})
	rev, err := raw.Create(ctx, "g", val)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := s.Claim(ctx, "g", "node-a", time.Hour); err != nil {
		b.Fatal(err)
	}
	b.Run("KVGet", func(b *testing.B) {
		for b.Loop() {
			if _, err := raw.Get(ctx, "g"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Guard", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.Guard(ctx, "g", "node-a", 1); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("KVUpdate", func(b *testing.B) {
		for b.Loop() {
			if rev, err = raw.Update(ctx, "g", val, rev); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Renew", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.Renew(ctx, "g", "node-a", time.Hour); err != nil {
				b.Fatal(err)
			}
		}
	})
}
