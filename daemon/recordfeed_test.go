package daemon

import (
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// TestRecordFeed_KeepsWritesByRevision: a republished record write is
// kept by its revision with its key and the revision of the key's write
// before it; a lookup of a write stored after the subscription began
// waits for it (up to writerWait), one stored before it does not wait,
// and beyond maxFeed writes the oldest go.
func TestRecordFeed_KeepsWritesByRevision(t *testing.T) {
	start := time.Now()
	f := &recordFeed{w: "default", since: start, from: start, changed: make(chan struct{}), byRev: map[uint64]feedWrite{}}
	write := func(rev, prev uint64) {
		m := nats.NewMsg(feedSubject("default", "o.eA"))
		m.Data = []byte("rec")
		m.Header.Set(jetstream.SequenceHeader, strconv.FormatUint(rev, 10))
		m.Header.Set(jetstream.LastSequenceHeader, strconv.FormatUint(prev, 10))
		m.Header.Set(jetstream.TimeStampHeaer, start.UTC().Format(time.RFC3339Nano))
		f.add(m)
	}
	write(5, 3)
	w, ok := f.at(5, time.Now())
	require.True(t, ok)
	require.Equal(t, "o.eA", w.key)
	require.Equal(t, uint64(3), w.prev)
	require.Equal(t, "rec", string(w.data))
	require.True(t, w.stored.Equal(start), "the bucket's time, not the feed's")

	go func() {
		time.Sleep(50 * time.Millisecond)
		write(6, 5)
	}()
	w, ok = f.at(6, time.Now())
	require.True(t, ok, "waited for")
	require.Equal(t, uint64(5), w.prev)

	began := time.Now()
	_, ok = f.at(7, start.Add(-time.Second))
	require.False(t, ok)
	require.Less(t, time.Since(began), writerWait/2, "stored before the subscription: not waited for")
	_, ok = f.at(7, time.Now())
	require.False(t, ok, "never came: given up after writerWait")

	for rev := uint64(10); rev < 10+maxFeed; rev++ {
		write(rev, rev-1)
	}
	_, ok = f.at(5, start.Add(-time.Second))
	require.False(t, ok, "the oldest went")
	_, ok = f.at(10+maxFeed-1, start.Add(-time.Second))
	require.True(t, ok)
	require.Len(t, f.byRev, maxFeed)
}
