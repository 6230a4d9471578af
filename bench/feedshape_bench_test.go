package bench_test

import (
	"context"
	"hash/fnv"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/server/servertest"
	"github.com/fencepost/fencepost/testkit/testutil"
)

// BenchmarkFeedShapes measures the JetStream primitives a worker's feed
// could be made of (docs/experiments/owners-read-every-post.md):
// messages of 128 bytes posted over 1,000 subjects, each op one message,
// read by
//
//   - consumers=N: N ordered consumers of every subject, as N workers'
//     feeds are today (every worker reads every post);
//   - republish=none: a stream RePublish by partition, with no subscriber
//     (what republishing itself costs the server);
//   - republish=N: the same, read by N subscribers that each take a third
//     of the partitions: every message reaches one reader, which checks
//     Nats-Last-Sequence (the subject's previous stored sequence) for gaps;
//   - ingest=N: the stream's own subject transform stores each message
//     under its partition, and N ordered consumers each read a third of
//     the partitions (filtered): nothing republished, every message read
//     once (docs/experiments/partitions.md).
//
// cpu-us/op is the process's CPU (the embedded server and every client),
// the figure to compare: go test -run '^$' -bench FeedShapes -benchtime
// 200000x ./bench/
func BenchmarkFeedShapes(b *testing.B) {
	for _, c := range []struct {
		name      string
		consumers int
		republish bool
		readers   int
		ingest    int
	}{
		{"consumers=1", 1, false, 0, 0},
		{"consumers=3", 3, false, 0, 0},
		{"republish=none", 0, true, 0, 0},
		{"republish=3", 0, true, 3, 0},
		{"ingest=3", 0, false, 0, 3},
	} {
		b.Run(c.name, func(b *testing.B) { feedShape(b, c.consumers, c.republish, c.readers, c.ingest) })
	}
}

// feedPartitions is the republish's partition count.
const feedPartitions = 12

func feedShape(b *testing.B, consumers int, republish bool, readers, ingest int) {
	srv := servertest.New(b)
	connect := func() *nats.Conn {
		nc, err := nats.Connect(srv.ClientURL())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(nc.Close)
		return nc
	}
	ctx := context.Background()
	js, err := jetstream.New(connect())
	if err != nil {
		b.Fatal(err)
	}
	cfg := jetstream.StreamConfig{Name: "S", Subjects: []string{"in.*"}}
	if republish {
		cfg.RePublish = &jetstream.RePublish{Source: "in.*", Destination: "out.{{partition(" + strconv.Itoa(feedPartitions) + ",1)}}.{{wildcard(1)}}"}
	}
	if ingest > 0 {
		cfg.Subjects = append(cfg.Subjects, "part.*.*")
		cfg.SubjectTransform = &jetstream.SubjectTransformConfig{Source: "in.*", Destination: "part.{{partition(" + strconv.Itoa(feedPartitions) + ",1)}}.{{wildcard(1)}}"}
	}
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		b.Fatal(err)
	}
	var got, gaps atomic.Int64
	filters := make([][]string, consumers) // each consumer's partitions (none: every message)
	for r := range ingest {
		var f []string
		for p := r; p < feedPartitions; p += ingest {
			f = append(f, "part."+strconv.Itoa(p)+".*")
		}
		filters = append(filters, f)
	}
	for _, filter := range filters {
		rjs, err := jetstream.New(connect())
		if err != nil {
			b.Fatal(err)
		}
		c, err := rjs.OrderedConsumer(ctx, "S", jetstream.OrderedConsumerConfig{FilterSubjects: filter})
		if err != nil {
			b.Fatal(err)
		}
		cc, err := c.Consume(func(m jetstream.Msg) {
			if _, err := m.Metadata(); err == nil {
				got.Add(1)
			}
		})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(cc.Stop)
	}
	for r := range readers {
		nc := connect()
		var mu sync.Mutex
		last := map[string]uint64{} // per subject: the last sequence seen
		for p := r; p < feedPartitions; p += readers {
			sub, err := nc.Subscribe("out."+strconv.Itoa(p)+".*", func(m *nats.Msg) {
				seq, _ := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
				prev, _ := strconv.ParseUint(m.Header.Get("Nats-Last-Sequence"), 10, 64)
				mu.Lock()
				if prev > last[m.Subject] {
					gaps.Add(1)
				}
				last[m.Subject] = seq
				mu.Unlock()
				got.Add(1)
			})
			if err != nil {
				b.Fatal(err)
			}
			if err := sub.SetPendingLimits(-1, -1); err != nil {
				b.Fatal(err)
			}
		}
		if err := nc.Flush(); err != nil {
			b.Fatal(err)
		}
	}
	want := int64(b.N) * int64(max(consumers, min(readers, 1), min(ingest, 1)))
	body := make([]byte, 128)
	subjects := make([]string, 1000)
	for i := range subjects {
		subjects[i] = "in.id" + strconv.Itoa(i)
	}
	b.ResetTimer()
	cpu0 := testutil.ProcessCPU()
	for i := range b.N {
		// A stalled publisher waits for its acknowledgements (the
		// default 200 ms ended the ingest shape's runs).
		if _, err := js.PublishAsync(subjects[i%len(subjects)], body, jetstream.WithStallWait(10*time.Second)); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		b.Fatal("posts not acknowledged within a minute")
	}
	deadline := time.Now().Add(time.Minute)
	for got.Load() < want {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d deliveries within a minute", got.Load(), want)
		}
		time.Sleep(time.Millisecond)
	}
	b.ReportMetric(float64((testutil.ProcessCPU()-cpu0).Microseconds())/float64(b.N), "cpu-us/op")
	if readers > 0 {
		b.ReportMetric(float64(gaps.Load()), "gaps")
	}
}

// TestFeedPartition: the partition a worker would compute for a subject
// token (FNV-1a of the token, modulo the partitions) is the one the
// server's {{partition(n,1)}} republishes it under.
func TestFeedPartition(t *testing.T) {
	srv := servertest.New(t)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testutil.Ctx(t, 30*time.Second)
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"in.*"},
		RePublish: &jetstream.RePublish{Source: "in.*", Destination: "out.{{partition(" + strconv.Itoa(feedPartitions) + ",1)}}.{{wildcard(1)}}"}})
	if err != nil {
		t.Fatal(err)
	}
	sub, err := nc.SubscribeSync("out.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		tok := "id" + strconv.Itoa(i)
		if _, err := js.Publish(ctx, "in."+tok, nil); err != nil {
			t.Fatal(err)
		}
		m, err := sub.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		h := fnv.New32a()
		h.Write([]byte(tok))
		if want := "out." + strconv.Itoa(int(h.Sum32()%feedPartitions)) + "." + tok; m.Subject != want {
			t.Fatalf("republished as %q, want %q", m.Subject, want)
		}
		if prev := m.Header.Get("Nats-Last-Sequence"); prev != "0" {
			t.Fatalf("%s: Nats-Last-Sequence %q for a subject's first message, want 0", tok, prev)
		}
	}
	// Nats-Last-Sequence is the subject's previous message, not the
	// stream's: a reader of one subject sees a gap in it.
	for _, tok := range []string{"id7", "id3"} {
		want, err := st.GetLastMsgForSubject(ctx, "in."+tok)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.Publish(ctx, "in."+tok, nil); err != nil {
			t.Fatal(err)
		}
		m, err := sub.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if prev := m.Header.Get("Nats-Last-Sequence"); prev != strconv.FormatUint(want.Sequence, 10) {
			t.Fatalf("%s: Nats-Last-Sequence %q, want %d (the subject's previous message)", tok, prev, want.Sequence)
		}
	}
}
