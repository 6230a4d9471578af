package daemon

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/world"
)

// The record feed: every record write the bucket stores, as it stores it
// (docs/security.md, "Epochs").
//
// The auditor's watch delivers a key's latest write. The bucket keeps one
// message a key, so a write followed closely by another of the same key
// is gone before the watch reaches it, and the write after it was judged
// without it: node-a's record at epoch E+1 written over node-b's claim of
// E+1 looked like a claim itself. Under --auth the bucket stream
// republishes each stored record write ($KV.fp_<w>.o.> to
// fpaudit.<w>.o.>), with its sequence and the sequence of the key's
// write before it (Nats-Sequence, Nats-Last-Sequence), at the moment it
// stores it. The destination is in the store account, which no client
// account imports, and no reply subject reaches it (the server maps the
// replies of requests that cross an import). fencepostd keeps each
// republished write for writerKeep, and the auditor judges the writes of
// a key its watch did not deliver, in order, before the one it did
// (auditor.missedWrites).
//
// A republished write the subscription dropped (a slow consumer) or that
// came before it (fencepostd not yet subscribed) is not known; the chain
// of a key stops there, and what came before it is judged by the content
// of the writes the watch delivered, as without the feed.

// feedRoot begins the subjects the bucket republishes record writes to.
const feedRoot = "fpaudit."

// feedSubject is the subject the bucket republishes record key key to.
func feedSubject(w, key string) string { return feedRoot + w + "." + key }

// feedRepublish is the bucket stream's republish of world w's records.
func feedRepublish(w string) *jetstream.RePublish {
	return &jetstream.RePublish{Source: wire.KeySubject(w, wire.RecordPrefix+">"), Destination: feedSubject(w, wire.RecordPrefix+">")}
}

// maxFeed bounds the writes the feed keeps; beyond it the oldest go.
const maxFeed = 1 << 16

// feedWrite is one record write as the bucket stored it.
type feedWrite struct {
	key    string      // the record key, o.<eid>
	hdr    nats.Header // its fingerprintHeaders, as stored
	data   []byte
	prev   uint64    // the revision of the key's write before it; 0: none
	stored time.Time // when the bucket stored it
	at     time.Time // when it came
}

// recordFeed keeps the record writes republished in the last writerKeep.
type recordFeed struct {
	w     string
	since time.Time // the subscription's start: writes stored before it are not known

	mu      sync.Mutex
	bucket  time.Time     // the creation time of the bucket stream the writes are of
	from    time.Time     // every record write stored since comes (zero: not known to)
	changed chan struct{} // closed and replaced at every write
	byRev   map[uint64]feedWrite
	order   []uint64 // revisions in arrival order, for pruning
	high    uint64   // the highest revision that came (they come in order)
}

// startFeed subscribes, in the store account, to world w's republished
// record writes.
func (d *Daemon) startFeed() error {
	f := &recordFeed{w: d.cfg.World, since: time.Now(), changed: make(chan struct{}), byRev: map[uint64]feedWrite{}}
	sub, err := d.nc.Subscribe(feedSubject(f.w, wire.RecordPrefix+">"), f.add)
	if err != nil {
		return fmt.Errorf("auth: the record feed's subscription: %w", err)
	}
	if err := sub.SetPendingLimits(1<<20, 256<<20); err != nil {
		return err
	}
	d.feed = f
	return nil
}

// ensure turns the republish of w's record writes on in its bucket
// stream (a world created without --auth, or removed and added again,
// has none), and notes from when every record write comes.
func (f *recordFeed) ensure(ctx context.Context, js jetstream.JetStream, w *world.World) error {
	s := handles.Of(w).Bucket
	info, err := s.Info(ctx)
	if err != nil {
		return err
	}
	cfg, want := info.Config, feedRepublish(w.Name)
	from := f.since
	if rp := cfg.RePublish; rp == nil || *rp != *want {
		cfg.RePublish = want
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			return fmt.Errorf("world %q: republish record writes for the auditor: %w", w.Name, err)
		}
		from = time.Now()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !info.Created.Equal(f.bucket) {
		if !f.bucket.IsZero() {
			// A bucket created again: its revisions start again, and
			// what the feed kept of the old one would answer for them.
			clear(f.byRev)
			f.order, f.high, f.from = nil, 0, time.Time{}
		}
		f.bucket = info.Created
	}
	if f.from.IsZero() || from.After(f.from) {
		f.from = from
	}
	return nil
}

// add keeps one republished write.
func (f *recordFeed) add(m *nats.Msg) {
	rev, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
	if err != nil || rev == 0 {
		return
	}
	prev, _ := strconv.ParseUint(m.Header.Get(jetstream.LastSequenceHeader), 10, 64)
	now := time.Now()
	stored, err := time.Parse(time.RFC3339Nano, m.Header.Get(jetstream.TimeStampHeaer))
	if err != nil {
		stored = now
	}
	hdr := nats.Header{} // what the auditor reads of it, not the republish's own
	for _, k := range fingerprintHeaders {
		if v := m.Header.Get(k); v != "" {
			hdr.Set(k, v)
		}
	}
	w := feedWrite{key: m.Subject[len(feedSubject(f.w, "")):], hdr: hdr, data: m.Data, prev: prev, stored: stored, at: now}
	f.mu.Lock()
	defer f.mu.Unlock()
	cut := now.Add(-writerKeep)
	i := 0
	for i < len(f.order) && (len(f.order)-i >= maxFeed || f.byRev[f.order[i]].at.Before(cut)) {
		delete(f.byRev, f.order[i])
		i++
	}
	f.order = append(f.order[i:], rev)
	f.byRev[rev] = w
	f.high = max(f.high, rev)
	close(f.changed)
	f.changed = make(chan struct{})
}

// at is the write stored at revision rev, waited for up to writerWait
// when it was stored (created) after the republish was known to be on
// and nothing after it has come yet (the bucket republishes in order: a
// later write come first says this one was dropped); false when not
// known.
func (f *recordFeed) at(rev uint64, created time.Time) (feedWrite, bool) {
	if f == nil {
		return feedWrite{}, false
	}
	var deadline <-chan time.Time
	for {
		f.mu.Lock()
		w, ok := f.byRev[rev]
		changed, from, passed := f.changed, f.from, f.high > rev
		f.mu.Unlock()
		if ok || passed || from.IsZero() || created.Before(from) || time.Since(created) > writerKeep {
			return w, ok
		}
		if deadline == nil {
			t := time.NewTimer(writerWait)
			defer t.Stop()
			deadline = t.C
		}
		select {
		case <-changed:
		case <-deadline:
			return feedWrite{}, false
		}
	}
}

// ensureFeed has the bucket republish w's record writes (recordFeed.ensure);
// without it, the writes the watch misses are judged by the write over
// them, as before the feed.
func (a *auditor) ensureFeed(ctx context.Context, w *world.World) {
	if a.d.feed == nil {
		return
	}
	if err := a.d.feed.ensure(ctx, a.js, w); err != nil {
		a.d.log.Warn("auditor: the record feed is off; writes its watch misses are judged by the write over them", "world", a.d.cfg.World, "err", err)
	}
}

// missedWrites are the writes of e's record key the bucket stored after
// last (the latest the auditor judged; 0: none) and before e, oldest
// first, as far as the record feed knows them: the writes the watch did
// not deliver. The feed bounds them (maxFeed, writerKeep). gap says that
// one more came between last and them, which the feed does not know.
func (a *auditor) missedWrites(e *entry, last uint64) (out []*entry, gap bool) {
	f := a.d.feed
	w, ok := f.at(e.rev, e.created)
	if !ok {
		return nil, false
	}
	rev := w.prev
	for rev > last {
		w, ok := f.at(rev, time.Time{})
		if !ok || w.key != e.key || w.prev >= rev {
			break
		}
		out = append(out, &entry{key: w.key, value: w.data, rev: rev, created: w.stored, op: kvOp(w.hdr), hdr: w.hdr})
		rev = w.prev
	}
	gap = last > 0 && rev > last
	slices.Reverse(out)
	return out, gap
}
