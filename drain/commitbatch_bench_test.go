package drain_test

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/server/servertest"
)

// BenchmarkFencedCursorWrites measures the two ways there
// are to send many ids' fenced cursor writes (docs/design/pipeline.md
// point 3): each one an asynchronous publish with its own expected-revision
// headers, many in flight ("async"), or up to 1,000 in one JetStream atomic
// batch whose commit checks every message's expectation ("atomic-batch").
// One op is one id's cursor write; ids cycle over 1,000 records. It
// measures the broker's primitives on which the commit path rests, not
// fencepost code: the faster that holds every invariant is the one used.
func BenchmarkFencedCursorWrites(b *testing.B) {
	const ids = 1000
	setup := func(b *testing.B) (*nats.Conn, jetstream.JetStream, []uint64) {
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
		kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "b"})
		if err != nil {
			b.Fatal(err)
		}
		st, err := js.Stream(ctx, "KV_b")
		if err != nil {
			b.Fatal(err)
		}
		cfg := st.CachedInfo().Config
		cfg.AllowAtomicPublish = true
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			b.Fatal(err)
		}
		revs := make([]uint64, ids)
		for i := range revs {
			if revs[i], err = kv.Put(ctx, "o."+strconv.Itoa(i), []byte(`{"v":1}`)); err != nil {
				b.Fatal(err)
			}
		}
		return nc, js, revs
	}
	cursor := func(i, n int, revs []uint64) *nats.Msg {
		id := strconv.Itoa(i % ids)
		m := nats.NewMsg("$KV.b.c." + id)
		m.Data = []byte(`{"v":1,"seq":` + strconv.Itoa(n) + `}`)
		m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(revs[i%ids], 10))
		m.Header.Set(jetstream.ExpectedLastSubjSeqSubjHeader, "$KV.b.o."+id)
		return m
	}
	b.Run("async", func(b *testing.B) {
		_, js, revs := setup(b)
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			if _, err := js.PublishMsgAsync(cursor(i, i, revs)); err != nil {
				b.Fatal(err)
			}
		}
		select {
		case <-js.PublishAsyncComplete():
		case <-time.After(time.Minute):
			b.Fatal("async commits not answered")
		}
	})
	b.Run("atomic-batch", func(b *testing.B) {
		nc, _, revs := setup(b)
		b.ReportAllocs()
		b.ResetTimer()
		for start := 0; start < b.N; start += ids {
			n := min(ids, b.N-start)
			batch := nats.NewInbox()[len(nats.InboxPrefix):]
			for k := range n {
				m := cursor(start+k, start+k, revs)
				m.Header.Set("Nats-Batch-Id", batch)
				m.Header.Set("Nats-Batch-Sequence", strconv.Itoa(k+1))
				if k < n-1 {
					if err := nc.PublishMsg(m); err != nil {
						b.Fatal(err)
					}
					continue
				}
				m.Header.Set("Nats-Batch-Commit", "1")
				r, err := nc.RequestMsg(m, 10*time.Second)
				if err != nil {
					b.Fatal(err)
				}
				var ack struct {
					Count int `json:"count"`
				}
				if err := json.Unmarshal(r.Data, &ack); err != nil || ack.Count != n {
					b.Fatalf("batch of %d not stored: %s", n, r.Data)
				}
			}
		}
	})
}
