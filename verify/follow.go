package verify

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/fencing"
	"github.com/fencepost/fencepost/internal/follow"
	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/testkit/history"
)

// commitLog is a list of commits, safe for concurrent use: the commits the
// owners reported.
type commitLog struct {
	mu sync.Mutex
	cs []history.Commit
}

func (l *commitLog) add(c history.Commit) {
	l.mu.Lock()
	l.cs = append(l.cs, c)
	l.mu.Unlock()
}

func (l *commitLog) all() []history.Commit {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]history.Commit(nil), l.cs...)
}

// CursorWrite is a cursor write the broker stored, as read from the bucket
// stream.
type CursorWrite struct {
	ID       string    `json:"id"`
	Seq      uint64    `json:"bucket_seq"`
	Cursor   uint64    `json:"cursor"`
	Revision uint64    `json:"revision"` // the fence's expected record revision; 0: none
	Subject  string    `json:"subject"`  // the fence's record subject
	At       time.Time `json:"at"`       // when the follower read it
}

type recordAt struct {
	id, node string
	epoch    uint64
}

// follower reads every message of the world's bucket stream as it is
// stored: ownership records (to name the holder a commit's fence
// expected) and cursor writes (the commits). A message replaced before the
// follower read it (the bucket keeps one revision per key) is skipped and
// counted.
type follower struct {
	world string
	f     *follow.Follower

	mu      sync.Mutex
	records map[uint64]recordAt
	writes  []CursorWrite
	last    uint64
	read    int
	skipped uint64
	bad     int
}

func followBucket(ctx context.Context, js jetstream.JetStream, world string) (*follower, error) {
	f := &follower{world: world, records: map[uint64]recordAt{}}
	s, err := js.Stream(ctx, wire.BucketStream(world))
	if err != nil {
		return nil, fmt.Errorf("verify: follow the bucket stream: %w", err)
	}
	// In stream order, one message at a time (internal/follow): a record
	// read after the cursor write it fenced would misname the holder.
	opts := follow.Options{Consumer: jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy}}
	if f.f, err = follow.Start(ctx, s, opts, f.onMsg); err != nil {
		return nil, fmt.Errorf("verify: follow the bucket stream: %w", err)
	}
	return f, nil
}

func (f *follower) onMsg(m jetstream.Msg, md *jetstream.MsgMetadata, err error) {
	at := time.Now()
	if err != nil {
		return
	}
	seq := md.Sequence.Stream
	f.mu.Lock()
	defer f.mu.Unlock()
	if seq <= f.last {
		return // a guard: internal/follow gives each message once, in order
	}
	f.skipped += seq - f.last - 1
	f.last = seq
	f.read++
	if m.Headers().Get(jsapi.HeaderKVOperation) != "" {
		return // a delete or purge marker
	}
	subj := m.Subject()
	key, ok := strings.CutPrefix(subj, wire.KeySubject(f.world, ""))
	if !ok {
		return
	}
	switch {
	case strings.HasPrefix(key, wire.RecordPrefix):
		id, err1 := wire.KeyID(f.world, wire.RecordPrefix, subj)
		r, err2 := wire.DecodeRecord(m.Data())
		if err1 != nil || err2 != nil {
			f.bad++
			return
		}
		f.records[seq] = recordAt{id: id, node: r.Node, epoch: r.Epoch}
	case strings.HasPrefix(key, wire.CursorPrefix):
		id, err1 := wire.KeyID(f.world, wire.CursorPrefix, subj)
		c, err2 := wire.DecodeCursor(m.Data())
		if err1 != nil || err2 != nil {
			f.bad++
			return
		}
		rev, _ := strconv.ParseUint(m.Headers().Get(fencing.HeaderExpectedSeq), 10, 64)
		f.writes = append(f.writes, CursorWrite{ID: id, Seq: seq, Cursor: c.Seq, Revision: rev, Subject: m.Headers().Get(fencing.HeaderExpectedSubject), At: at})
	}
}

// caughtUp says whether the follower has read up to seq.
func (f *follower) caughtUp(seq uint64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last >= seq
}

func (f *follower) stop() { f.f.Stop() }

// Coverage is what the follower saw of the bucket stream.
type Coverage struct {
	Read         int    `json:"read"`         // messages read
	Skipped      uint64 `json:"skipped"`      // replaced before they were read
	Bad          int    `json:"bad"`          // records or cursors that did not decode
	Unattributed int    `json:"unattributed"` // commits whose holder no record, report or delivery names
	FromOwners   int    `json:"from_owners"`  // commits known only from an owner's report (skipped in the stream)
}

// commits merges the cursor writes read from the bucket stream with the
// commits the owners reported (by bucket sequence) into the commits of
// the history: each names the holder of the record revision its fence
// expected, from the record read in the stream, else the owner's report,
// else a delivery made under that revision. It also returns the writes
// that carried no fence of their id's record.
func (f *follower) commits(reported []history.Commit, deliveries []history.Delivery) ([]history.Commit, []CursorWrite, Coverage) {
	f.mu.Lock()
	defer f.mu.Unlock()
	cov := Coverage{Read: f.read, Skipped: f.skipped, Bad: f.bad}
	bySeq := map[uint64]history.Commit{}
	for _, c := range reported {
		bySeq[c.StreamSeq] = c
	}
	type idRev struct {
		id  string
		rev uint64
	}
	byRev := map[idRev]history.Delivery{}
	for _, d := range deliveries {
		byRev[idRev{d.ID, d.Revision}] = d
	}
	var out []history.Commit
	var unfenced []CursorWrite
	seen := map[uint64]bool{}
	for _, w := range f.writes {
		seen[w.Seq] = true
		if fenceID, err := wire.KeyID(f.world, wire.RecordPrefix, w.Subject); w.Revision == 0 || err != nil || fenceID != w.ID {
			unfenced = append(unfenced, w)
			continue
		}
		c := history.Commit{ID: w.ID, Revision: w.Revision, Cursor: w.Cursor, StreamSeq: w.Seq, At: w.At}
		rep, reportedOK := bySeq[w.Seq]
		switch r, ok := f.records[w.Revision]; {
		case ok && r.id == w.ID:
			c.Node, c.Epoch = r.node, r.epoch
		case reportedOK:
			c.Node, c.Epoch = rep.Node, rep.Epoch
		default:
			d, ok := byRev[idRev{w.ID, w.Revision}]
			if !ok {
				cov.Unattributed++
				continue
			}
			c.Node, c.Epoch = d.Node, d.Epoch
		}
		if reportedOK && rep.At.Before(c.At) {
			c.At = rep.At
		}
		out = append(out, c)
	}
	for _, c := range reported {
		if !seen[c.StreamSeq] {
			cov.FromOwners++
			out = append(out, c)
		}
	}
	return out, unfenced, cov
}
