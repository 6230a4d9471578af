package drain_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/server/servertest"
)

// BenchmarkStateBatch measures what a state commit costs the server
// (docs/design.md 3.12): an atomic batch of one state key and the cursor,
// both fenced on the record, against the single fenced cursor write of a
// plain commit, one at a time, on file and memory storage. On a single
// file-backed replica the server writes each batch to a synced store of
// its own before it applies it.
//
//	go test -run '^$' -bench StateBatch -benchtime 300x ./drain/
func BenchmarkStateBatch(b *testing.B) {
	for _, st := range []jetstream.StorageType{jetstream.FileStorage, jetstream.MemoryStorage} {
		for _, batch := range []bool{true, false} {
			name := st.String() + "/single"
			if batch {
				name = st.String() + "/batch"
			}
			b.Run(name, func(b *testing.B) {
				srv := servertest.New(b)
				nc, err := nats.Connect(srv.ClientURL())
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(nc.Close)
				js, err := jetstream.New(nc)
				if err != nil {
					b.Fatal(err)
				}
				ctx := context.Background()
				kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "b", Storage: st})
				if err != nil {
					b.Fatal(err)
				}
				s, err := js.Stream(ctx, "KV_b")
				if err != nil {
					b.Fatal(err)
				}
				cfg := s.CachedInfo().Config
				cfg.AllowAtomicPublish = true
				if _, err := js.UpdateStream(ctx, cfg); err != nil {
					b.Fatal(err)
				}
				rev, err := kv.Put(ctx, "o.x", []byte("r"))
				if err != nil {
					b.Fatal(err)
				}
				msg := func(subj string, i int) *nats.Msg {
					m := nats.NewMsg(subj)
					m.Data = []byte(strconv.Itoa(i))
					m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(rev, 10))
					m.Header.Set(jetstream.ExpectedLastSubjSeqSubjHeader, "$KV.b.o.x")
					return m
				}
				b.ResetTimer()
				for i := range b.N {
					if batch {
						_, err = jsapi.PublishBatch(ctx, js, []*nats.Msg{msg("$KV.b.s.x.count", i), msg("$KV.b.c.x", i)})
					} else {
						_, err = js.PublishMsg(ctx, msg("$KV.b.c.x", i))
					}
					if err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
