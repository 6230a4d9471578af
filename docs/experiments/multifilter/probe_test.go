package multifilter

import (
	"context"
	"math/rand"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// TestMultiFilterNextMatchesSingleFilter asks the server's multi-filter
// path directly, over and over, while zipf-drawn posts are stored and
// shards are purged: a consumer filtered on a random set of shard
// filters, from a random start (often below the stream's first sequence,
// where the file store skips ahead through its per-subject index), must
// deliver first the lowest of what each filter alone finds from that
// start (a direct get of the next message for each filter: the
// single-filter path). Purges are held off between the two questions, and
// the consumer is asked first: any message the single-filter path finds
// below the consumer's was stored before the consumer's, so a consumer
// that passes over it skipped it.
//
// Runs 3 s by default (MULTIFILTER_PROBE_SECONDS for longer; storage by
// MULTIFILTER_STORAGE; MULTIFILTER_BODY the body size, 1024 by default
// so that the file store has many blocks).
func TestMultiFilterNextMatchesSingleFilter(t *testing.T) {
	secs, err := strconv.Atoi(env("MULTIFILTER_PROBE_SECONDS", "3"))
	require.NoError(t, err)
	bodySize := envInt("MULTIFILTER_BODY", 1024)
	_, nc := startServer(t)
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	storage := jetstream.FileStorage
	if env("MULTIFILTER_STORAGE", "file") == "memory" {
		storage = jetstream.MemoryStorage
	}
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name:     "S",
		Subjects: []string{"in.>"},
		Storage:  storage,
		SubjectTransform: &jetstream.SubjectTransformConfig{
			Source:      "in.*",
			Destination: "st.{{partition(" + strconv.Itoa(shards) + ",1)}}.{{wildcard(1)}}",
		},
	})
	require.NoError(t, err)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	// Producer.
	wg.Add(1)
	go func() {
		defer wg.Done()
		r := rand.New(rand.NewSource(1))
		z := rand.NewZipf(r, zipfS, 1, ids-1)
		body := make([]byte, bodySize)
		for {
			select {
			case <-stop:
				return
			default:
			}
			for range 256 {
				if _, err := js.PublishAsync("in."+idName(int(z.Uint64())), body); err != nil {
					t.Error(err)
					return
				}
			}
			select {
			case <-js.PublishAsyncComplete():
			case <-time.After(10 * time.Second):
				t.Error("publishes not acked in 10 s")
				return
			}
		}
	}()
	// Purger: shard by shard, below the last sequence minus a random
	// lag (sometimes all of a shard), each purge under mu.
	var mu sync.Mutex
	var purges int
	wg.Add(1)
	go func() {
		defer wg.Done()
		r := rand.New(rand.NewSource(2))
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			info, err := stream.Info(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			last := info.State.LastSeq
			lag := uint64(r.Intn(20000))
			if last <= lag {
				continue
			}
			q := r.Intn(shards)
			mu.Lock()
			err = stream.Purge(ctx, jetstream.WithPurgeSubject("st."+strconv.Itoa(q)+".*"), jetstream.WithPurgeSequence(last-lag))
			purges++
			mu.Unlock()
			if err != nil {
				t.Error(err)
				return
			}
		}
	}()

	// next is the single-filter answer: the first message at or after
	// start on filter, 0 if none.
	next := func(filter string, start uint64) uint64 {
		m, err := stream.GetMsg(ctx, start, jetstream.WithGetMsgSubject(filter))
		if err != nil {
			require.ErrorIs(t, err, jetstream.ErrMsgNotFound, "get next of %s from %d", filter, start)
			return 0
		}
		return m.Sequence
	}

	r := rand.New(rand.NewSource(3))
	deadline := time.Now().Add(time.Duration(secs) * time.Second)
	var probes, mismatches, multiBlock int
	for time.Now().Before(deadline) && !t.Failed() {
		info, err := stream.Info(ctx)
		require.NoError(t, err)
		st := info.State
		if st.Msgs == 0 {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		// A random set of 2 to 48 shards, a start from before the
		// first sequence to the last.
		n := 2 + r.Intn(47)
		set := r.Perm(shards)[:n]
		filters := make([]string, n)
		for i, q := range set {
			filters[i] = "st." + strconv.Itoa(q) + ".*"
		}
		lo := max(int64(st.FirstSeq)-1000, 1)
		start := uint64(lo + r.Int63n(int64(st.LastSeq)-lo+1))
		if r.Intn(3) == 0 {
			// At or just below the first sequence: the file store's
			// skip ahead through its per-subject index.
			start = uint64(max(int64(st.FirstSeq)-r.Int63n(100), 1))
		}

		mu.Lock()
		cons, err := stream.CreateConsumer(ctx, jetstream.ConsumerConfig{
			FilterSubjects:    filters,
			DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
			OptStartSeq:       start,
			AckPolicy:         jetstream.AckNonePolicy,
			MemoryStorage:     true,
			InactiveThreshold: 10 * time.Second,
		})
		require.NoError(t, err)
		batch, err := cons.FetchNoWait(1)
		require.NoError(t, err)
		var got uint64
		for m := range batch.Messages() {
			md, err := m.Metadata()
			require.NoError(t, err)
			got = md.Sequence.Stream
		}
		require.NoError(t, batch.Error())
		var want uint64
		for _, f := range filters {
			if s := next(f, start); s != 0 && (want == 0 || s < want) {
				want = s
			}
		}
		mu.Unlock()
		require.NoError(t, stream.DeleteConsumer(ctx, cons.CachedInfo().Name))
		probes++
		if got != 0 && got-start > 1 && start < st.LastSeq {
			multiBlock++
		}
		// A message stored after the consumer's answer can only be
		// higher than it: got == 0 with want != 0 is a miss only when
		// want was stored before the probe began.
		switch {
		case got == want:
		case got == 0 && want > st.LastSeq:
		case got == 0 || want != 0 && want < got:
			mismatches++
			t.Errorf("filters %d shards from %d (stream first %d last %d): the multi-filter consumer gave %d, the single filters find %d first",
				n, start, st.FirstSeq, st.LastSeq, got, want)
		default:
			// got < want, or want == 0 with got != 0: the single-filter
			// path missed what the consumer found.
			mismatches++
			t.Errorf("filters %d shards from %d (stream first %d last %d): the multi-filter consumer gave %d, the single filters find %d",
				n, start, st.FirstSeq, st.LastSeq, got, want)
		}
	}
	close(stop)
	wg.Wait()
	info, err := stream.Info(ctx)
	require.NoError(t, err)
	t.Logf("probes %d (%d answered past their start), mismatches %d, purges %d; stream msgs %d, first %d, last %d, %d deleted",
		probes, multiBlock, mismatches, purges, info.State.Msgs, info.State.FirstSeq, info.State.LastSeq, info.State.NumDeleted)
	require.Positive(t, probes)
}
