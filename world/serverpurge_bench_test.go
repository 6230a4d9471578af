package world_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/server/servertest"
)

// BenchmarkServerPurgeSpan measures what a purge of one subject below a
// sequence costs the server as a function of the span it covers: the
// distance between the first and the last message of the subject it
// removes, filled with other subjects' messages (docs/experiments/global-sweep.md,
// "What a purge of one subject costs the server"). Each op purges one
// subject that stores two messages, span messages of other subjects and
// the other ops' first messages apart (span=0: one message); ns/op is the
// request's round trip to an in-process server, one request at a time.
//
//	go test -run '^$' -bench ServerPurgeSpan -benchtime 2000x ./world/
func BenchmarkServerPurgeSpan(b *testing.B) {
	for _, span := range []int{0, 1000, 10000, 50000} {
		b.Run(fmt.Sprint("span=", span), func(b *testing.B) { benchPurgeSpan(b, span) })
	}
}

func benchPurgeSpan(b *testing.B, span int) {
	srv := servertest.New(b)
	nc, js := servertest.Connect(b, srv.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, Storage: jetstream.FileStorage})
	require.NoError(b, err)
	pub := func(subj string) {
		_, err := js.PublishAsync(subj, []byte("0123456789abcdef0123456789abcdef"))
		require.NoError(b, err)
	}
	wait := func() {
		select {
		case <-js.PublishAsyncComplete():
		case <-ctx.Done():
			b.Fatal("publishes not acknowledged")
		}
	}
	// Each target's first message, then span fillers (and the other
	// targets' first messages), then its second: the purge below the
	// second plus one removes both, a span of about span+N apart (0:
	// each target stores one message, purged alone).
	n := b.N
	for i := range n {
		pub(fmt.Sprint("s.t.", i))
	}
	for i := range span {
		pub(fmt.Sprint("s.f.", i%1000))
	}
	if span > 0 {
		for i := range n {
			pub(fmt.Sprint("s.t.", i))
		}
	}
	wait()
	last := uint64(2*n + span)
	if span == 0 {
		last = uint64(n)
	}
	b.ResetTimer()
	for i := range n {
		require.NoError(b, jsapi.Purge(ctx, nc, "S", fmt.Sprint("s.t.", i), last+1))
	}
	b.StopTimer()
	info, err := js.Stream(ctx, "S")
	require.NoError(b, err)
	i, err := info.Info(ctx)
	require.NoError(b, err)
	require.Equal(b, uint64(span), i.State.Msgs, "only the fillers are left")
}
