package shard_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/shard"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

// TestFeed_EachShardWholeAndInOrderAcrossChanges: the node's one reader
// hands each shard's holder every message of its shard, in stream order,
// with no gap and none twice, while posts arrive and the set it reads
// changes under it: holders that stop taking mail for longer than the
// pause (their shard paused, then resumed), holders that end and begin
// again after the last message they had (as a new holder starts from its
// cursor), and shards that begin late. Each shard's list is compared
// with the stream's own list of the shard's messages.
func TestFeed_EachShardWholeAndInOrderAcrossChanges(t *testing.T) {
	const shards, posts = 6, 3000
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{Shards: shards})
	ctx := testutil.Ctx(t, 2*time.Minute)
	wk, err := shard.New(w.World, w.Ownership, shard.Config{Node: "a"}, func(context.Context, drain.Message) error { return nil })
	require.NoError(t, err)
	fctx, stop := context.WithCancel(ctx)
	tf, wait := shard.StartTestFeed(fctx, wk)
	defer wait()
	defer stop()

	posted := make(chan struct{})
	go func() {
		defer close(posted)
		r := rand.New(rand.NewPCG(7, 8))
		for i := range posts {
			p, err := w.Queue.SendAsync(fmt.Sprint("id-", r.IntN(200)), []byte("x"))
			if err != nil {
				t.Error(err)
				return
			}
			if i%100 == 99 {
				if _, err := p.Wait(ctx); err != nil {
					t.Error(err)
					return
				}
				time.Sleep(time.Millisecond) // posts spread over the churn
			}
		}
	}()

	got := make([][]uint64, shards)
	var wg sync.WaitGroup
	for q := range shards {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(q), 9))
			if q >= shards-2 {
				time.Sleep(50 * time.Millisecond) // begins after others: the reader starts lower again
			}
			var last uint64
			s := tf.Add(q, 1)
			defer func() { s.Remove() }()
			idle := time.NewTimer(3 * time.Second)
			for {
				s.ResumeIfPaused()
				select {
				case m, ok := <-s.Msgs():
					if !ok {
						t.Errorf("shard %d: the feed closed its channel", q)
						return
					}
					if _, _, mq, err := wire.ShardedID(w.Name, m.Subject, shards); err != nil || mq != q {
						t.Errorf("shard %d was handed %q (%v)", q, m.Subject, err)
						return
					}
					got[q] = append(got[q], m.Sequence)
					last = m.Sequence
					idle.Reset(3 * time.Second)
				case <-idle.C:
					return // nothing for 3 s after the posts: the shard is read whole
				}
				switch n := r.IntN(400); {
				case n == 0:
					time.Sleep(250 * time.Millisecond) // takes nothing: its shard is paused
				case n <= 3:
					// Takes nothing just past the pause, and takes mail
					// again as the reader is being made again.
					time.Sleep(100*time.Millisecond + time.Duration(r.IntN(8))*time.Millisecond)
				case n == 4:
					s.Remove() // ends; a new holding begins after what it had
					s = tf.Add(q, last+1)
				}
			}
		})
	}
	<-posted
	wg.Wait()

	// The stream's own list of each shard's messages.
	want := make([][]uint64, shards)
	for q := range shards {
		c, err := handles.Of(w.World).Mailbox.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{wire.ShardFilter(w.Name, q)}})
		require.NoError(t, err)
		info, err := c.Info(ctx)
		require.NoError(t, err)
		for range info.NumPending {
			m, err := c.Next(jetstream.FetchMaxWait(5 * time.Second))
			require.NoError(t, err)
			md, err := m.Metadata()
			require.NoError(t, err)
			want[q] = append(want[q], md.Sequence.Stream)
		}
	}
	total := 0
	for q := range shards {
		total += len(want[q])
		require.Equal(t, want[q], got[q], "shard %d: handed out as stored, in order, no gap, none twice", q)
	}
	require.Equal(t, posts, total)
}
