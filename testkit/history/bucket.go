package history

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
)

// The commits of a world as the broker stored them, read from its bucket
// stream: what fencepost verify checks, and what the fault suite checks of
// a sharded world, whose shard workers report no commits.

// CursorWrite is a cursor write the broker stored, as read from the bucket
// stream. In a sharded world ID is the shard's unit (wire.ShardUnit),
// Cursor the shard cursor's mark and Pending its exceptions.
type CursorWrite struct {
	ID       string                    `json:"id"`
	Seq      uint64                    `json:"bucket_seq"`
	Cursor   uint64                    `json:"cursor"`
	Pending  map[string]wire.PendingID `json:"pending,omitempty"`
	Revision uint64                    `json:"revision"` // the fence's expected record revision; 0: none
	Subject  string                    `json:"subject"`  // the fence's record subject
	At       time.Time                 `json:"at"`       // when the follower read it
}

type recordAt struct {
	id, node string
	epoch    uint64
}

// BucketFollower reads every message of a world's bucket stream as it is
// stored: ownership records (to name the holder a commit's fence
// expected) and cursor writes (the commits). A message replaced before the
// follower read it (the bucket keeps one revision per key) is skipped and
// counted.
type BucketFollower struct {
	world  string
	shards int // the world's; 0: a per-id world
	f      *follow.Follower

	mu      sync.Mutex
	records map[uint64]recordAt
	writes  []CursorWrite
	last    uint64
	read    int
	skipped uint64
	bad     int
}

// FollowBucket follows the bucket stream of world (of shards shards; 0: a
// per-id world) from its first message, until Stop.
func FollowBucket(ctx context.Context, js jetstream.JetStream, world string, shards int) (*BucketFollower, error) {
	f := &BucketFollower{world: world, shards: shards, records: map[uint64]recordAt{}}
	s, err := js.Stream(ctx, wire.BucketStream(world))
	if err != nil {
		return nil, fmt.Errorf("history: follow the bucket stream: %w", err)
	}
	// In stream order, one message at a time (internal/follow): a record
	// read after the cursor write it fenced would misname the holder.
	opts := follow.Options{}
	if f.f, err = follow.Start(ctx, s, opts, f.onMsg); err != nil {
		return nil, fmt.Errorf("history: follow the bucket stream: %w", err)
	}
	return f, nil
}

func (f *BucketFollower) onMsg(m jetstream.Msg, md *jetstream.MsgMetadata, err error) {
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
		var w CursorWrite
		var err2 error
		if _, sharded := wire.UnitShard(id, f.shards); sharded {
			var c wire.ShardCursor
			c, err2 = wire.DecodeShardCursor(m.Data())
			w.Cursor, w.Pending = c.Seq, c.Pending
		} else {
			var c wire.Cursor
			c, err2 = wire.DecodeCursor(m.Data())
			w.Cursor = c.Seq
		}
		if err1 != nil || err2 != nil {
			f.bad++
			return
		}
		w.ID, w.Seq, w.At = id, seq, at
		w.Revision, _ = strconv.ParseUint(m.Headers().Get(fencing.HeaderExpectedSeq), 10, 64)
		w.Subject = m.Headers().Get(fencing.HeaderExpectedSubject)
		f.writes = append(f.writes, w)
	}
}

// CaughtUp says whether the follower has read up to bucket sequence seq.
func (f *BucketFollower) CaughtUp(seq uint64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last >= seq
}

// Stop ends the following.
func (f *BucketFollower) Stop() { f.f.Stop() }

// Coverage is what the follower saw of the bucket stream.
type Coverage struct {
	Read         int    `json:"read"`         // messages read
	Skipped      uint64 `json:"skipped"`      // replaced before they were read
	Bad          int    `json:"bad"`          // records or cursors that did not decode
	Unattributed int    `json:"unattributed"` // commits whose holder no record, report or delivery names
	FromOwners   int    `json:"from_owners"`  // commits known only from an owner's report (skipped in the stream)
}

// Commits merges the cursor writes read from the bucket stream with the
// commits the owners reported (by bucket sequence) into the commits of
// the history: each names the holder of the record revision its fence
// expected, from the record read in the stream, else the owner's report,
// else a delivery made under that revision (in a sharded world, a
// delivery of an id of the shard). It also returns the exceptions of
// each shard cursor written with any, by bucket sequence, and the writes
// that carried no fence of their id's record.
func (f *BucketFollower) Commits(reported []Commit, deliveries []Delivery) ([]Commit, map[uint64]map[string]wire.PendingID, []CursorWrite, Coverage) {
	f.mu.Lock()
	defer f.mu.Unlock()
	cov := Coverage{Read: f.read, Skipped: f.skipped, Bad: f.bad}
	bySeq := map[uint64]Commit{}
	for _, c := range reported {
		bySeq[c.StreamSeq] = c
	}
	type idRev struct {
		id  string
		rev uint64
	}
	byRev := map[idRev]Delivery{}
	for _, d := range deliveries {
		byRev[idRev{UnitOf(d.ID, f.shards), d.Revision}] = d
	}
	var out []Commit
	pending := map[uint64]map[string]wire.PendingID{}
	var unfenced []CursorWrite
	seen := map[uint64]bool{}
	for _, w := range f.writes {
		seen[w.Seq] = true
		if fenceID, err := wire.KeyID(f.world, wire.RecordPrefix, w.Subject); w.Revision == 0 || err != nil || fenceID != w.ID {
			unfenced = append(unfenced, w)
			continue
		}
		c := Commit{ID: w.ID, Revision: w.Revision, Cursor: w.Cursor, StreamSeq: w.Seq, At: w.At}
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
		if len(w.Pending) > 0 {
			pending[w.Seq] = w.Pending
		}
		out = append(out, c)
	}
	for _, c := range reported {
		if !seen[c.StreamSeq] {
			cov.FromOwners++
			out = append(out, c)
		}
	}
	return out, pending, unfenced, cov
}
