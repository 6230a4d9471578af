package daemon

import (
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// republished is world default's record key key written at revision rev
// over prev, stored at stored, as the bucket republishes it.
func republished(key string, rev, prev uint64, stored time.Time, data []byte) *nats.Msg {
	m := nats.NewMsg(feedSubject("default", key))
	m.Data = data
	m.Header.Set(jetstream.SequenceHeader, strconv.FormatUint(rev, 10))
	m.Header.Set(jetstream.LastSequenceHeader, strconv.FormatUint(prev, 10))
	m.Header.Set(jetstream.TimeStampHeaer, stored.UTC().Format(time.RFC3339Nano))
	return m
}

// TestRecordFeed_KeepsWritesByRevision: a republished record write is
// kept by its revision with its key and the revision of the key's write
// before it; a lookup of a write stored after the subscription began
// waits for it (up to writerWait), one stored before it does not wait,
// and beyond maxFeed writes the oldest go.
func TestRecordFeed_KeepsWritesByRevision(t *testing.T) {
	start := time.Now()
	f := &recordFeed{w: "default", since: start, from: start, changed: make(chan struct{}), byRev: map[uint64]feedWrite{}}
	write := func(rev, prev uint64) {
		f.add(republished("o.eA", rev, prev, start, []byte("rec")))
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
	_, ok = f.at(4, time.Now())
	require.False(t, ok)
	require.Less(t, time.Since(began), writerWait/2, "5 and 6 came, so 4 was dropped: not waited for")
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

// TestRecordFeed_MissedWritesFollowTheChain: the writes of a key the
// watch missed are followed back from the delivered one through each
// write's predecessor to the last one judged, oldest first; a write the
// feed does not know stops the walk (a gap, when the auditor had judged
// one before), as do another key's write and a predecessor that does not
// go back.
func TestRecordFeed_MissedWritesFollowTheChain(t *testing.T) {
	start := time.Now()
	f := &recordFeed{w: "default", since: start, from: start, changed: make(chan struct{}), byRev: map[uint64]feedWrite{}}
	write := func(key string, rev, prev uint64) {
		m := republished(key, rev, prev, start, []byte(strconv.FormatUint(rev, 10)))
		m.Header.Set("Nats-Expected-Last-Subject-Sequence", strconv.FormatUint(prev, 10))
		f.add(m)
	}
	a := &auditor{d: &Daemon{feed: f}}
	revs := func(es []*entry) (out []uint64) {
		for _, e := range es {
			out = append(out, e.rev)
		}
		return out
	}
	delivered := func(rev uint64) *entry { return &entry{key: "o.eA", rev: rev, created: start.Add(-time.Second)} }

	// o.eA: 10 (judged), 12, 15 missed, 20 delivered; o.eB's 13 between.
	for _, w := range [][2]uint64{{10, 0}, {12, 10}, {15, 12}, {20, 15}} {
		write("o.eA", w[0], w[1])
	}
	write("o.eB", 13, 0)
	got, gap := a.missedWrites(delivered(20), 10)
	require.Equal(t, []uint64{12, 15}, revs(got))
	require.False(t, gap)
	require.Equal(t, "12", string(got[0].value))
	require.Equal(t, "10", got[0].hdr.Get("Nats-Expected-Last-Subject-Sequence"), "its fence kept")
	require.True(t, got[0].created.Equal(start), "stored at the bucket's time")

	got, gap = a.missedWrites(delivered(20), 15)
	require.Empty(t, got, "nothing missed since the last judged")
	require.False(t, gap)

	got, gap = a.missedWrites(delivered(20), 0)
	require.Equal(t, []uint64{10, 12, 15}, revs(got), "none judged yet: back to the key's first write")
	require.False(t, gap)

	// 25 missed, not in the feed (dropped); 30 delivered after it.
	write("o.eA", 30, 25)
	got, gap = a.missedWrites(delivered(30), 20)
	require.Empty(t, got)
	require.True(t, gap, "a write between 20 and 30 the feed does not know")

	// A predecessor of another key, or one that does not go back, stops it.
	write("o.eA", 40, 13)
	got, _ = a.missedWrites(delivered(40), 10)
	require.Empty(t, got, "o.eB's write is not o.eA's")
	write("o.eA", 50, 45)
	write("o.eA", 45, 50)
	got, _ = a.missedWrites(delivered(50), 10)
	require.Empty(t, got, "45's predecessor, 50, does not go back: not a chain the bucket makes")
}
