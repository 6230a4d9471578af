package drain_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/server/servertest"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
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

// BenchmarkStateHoldings drains 64 ids held through one session, 200
// messages each, all at once, with a counting state handler: commits of
// many ids meeting in shared batches ("shared") against a batch of its own
// per commit ("own"). One op is one message.
//
//	go test -run '^$' -bench StateHoldings -benchtime 12800x -count 3 ./drain/
func BenchmarkStateHoldings(b *testing.B) {
	for _, shared := range []bool{true, false} {
		name := "own"
		if shared {
			name = "shared"
		}
		b.Run(name, func(b *testing.B) {
			if !shared {
				drain.Unshared(b)
			}
			const ids = 64
			env := testutil.Start(b, testutil.Target{Name: "single"})
			ctx := context.Background()
			w := env.World(b, world.Config{})
			d, err := drain.New(w.World, w.Ownership, drain.WithCommitEvery(100, time.Second))
			if err != nil {
				b.Fatal(err)
			}
			per := max(b.N/ids, 1)
			for i := range ids {
				for range per {
					if _, err := w.Queue.SendAsync("id-"+strconv.Itoa(i), []byte("x")); err != nil {
						b.Fatal(err)
					}
				}
			}
			select {
			case <-handles.Of(w).JS.PublishAsyncComplete():
			case <-time.After(time.Minute):
				b.Fatal("posts not acknowledged")
			}
			ss, err := w.Ownership.OpenSession(ctx, "n1", time.Minute)
			if err != nil {
				b.Fatal(err)
			}
			defer ss.Close()
			hs := make([]*drain.Holding, ids)
			for i := range hs {
				l, err := ss.Claim(ctx, "id-"+strconv.Itoa(i))
				if err != nil {
					b.Fatal(err)
				}
				if hs[i], err = d.HoldState(l); err != nil {
					b.Fatal(err)
				}
			}
			count := drain.StateHandler(func(_ context.Context, _ drain.Message, st *drain.State) error {
				n := 0
				if v, ok := st.Get("count"); ok {
					n, _ = strconv.Atoi(string(v))
				}
				return st.Put("count", []byte(strconv.Itoa(n+1)))
			}).Handler()
			b.ResetTimer()
			var wg sync.WaitGroup
			for _, h := range hs {
				wg.Go(func() {
					if _, err := h.Drain(ctx, count); err != nil {
						b.Error(err)
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			for i := range ids {
				st, err := w.Mailboxes.ReadState(ctx, "id-"+strconv.Itoa(i))
				if err != nil || string(st.Values["count"]) != strconv.Itoa(per) {
					b.Fatalf("id-%d: count %q, want %d (%v)", i, st.Values["count"], per, err)
				}
			}
		})
	}
}
