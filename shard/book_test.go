package shard

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/wire"
)

// TestBook_CursorCoversOnlyWhatWasDone runs the book against a model of
// the shard's stream: posts, reads in stream order, handler calls that
// succeed or fail, retries, dead letters, commits, and crashes (a new book
// from the last commit, its reads starting at the commit's Low, what was
// in flight lost). After every commit: the cursor covers only messages a
// handler finished with (or dead-lettered), its mark and its Low never go
// back, and it decodes as it encodes. At the end, with every handler
// succeeding, every message was finished with and the book is idle. It
// would fail if the mark passed a message in flight, if a pending id's
// exception were dropped while messages of it below the starting mark were
// unread, or if a restarted book skipped a message its cursor did not
// cover.
func TestBook_CursorCoversOnlyWhatWasDone(t *testing.T) {
	for seed := range uint64(300) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) { runBookModel(t, seed) })
	}
}

type modelMsg struct {
	seq uint64
	eid string
}

func runBookModel(t *testing.T, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 7))
	const maxDeliveries = 3
	eids := []string{wire.EncodeID("a"), wire.EncodeID("b"), wire.EncodeID("c"), wire.EncodeID("d")}
	var stream []modelMsg // in stream order; seqs with gaps (other shards)
	done := map[uint64]bool{}
	var committed wire.ShardCursor
	b := newBook(committed)
	next := 0 // index in stream of the next message to read
	type call struct {
		eid string
		e   *entry
		ok  bool
	}
	var running []call
	var holding []string
	seq := uint64(0)
	check := func(c wire.ShardCursor) {
		t.Helper()
		for _, m := range stream {
			if c.Committed(m.eid, m.seq) && !done[m.seq] {
				t.Fatalf("cursor %+v covers message %d of %s, which no handler finished", c, m.seq, m.eid)
			}
		}
		if c.Seq < committed.Seq || c.Low() < committed.Low() {
			t.Fatalf("cursor went back: %+v after %+v", c, committed)
		}
		data, err := wire.EncodeShardCursor(c)
		if err != nil {
			t.Fatalf("encode %+v: %v", c, err)
		}
		back, err := wire.DecodeShardCursor(data)
		if err != nil || back.Seq != c.Seq || len(back.Pending) != len(c.Pending) {
			t.Fatalf("round trip of %+v: %+v, %v", c, back, err)
		}
	}
	restart := func() {
		b = newBook(committed)
		running, holding = nil, nil
		next = 0
		for next < len(stream) && stream[next].seq < b.from() {
			next++
		}
	}
	read := func() {
		m := stream[next]
		next++
		b.add(&jetstream.RawStreamMsg{Sequence: m.seq}, m.eid, m.eid)
	}
	for step := 0; step < 400; step++ {
		switch op := r.IntN(10); {
		case op <= 1:
			seq += 1 + uint64(r.IntN(3))
			stream = append(stream, modelMsg{seq: seq, eid: eids[r.IntN(len(eids))]})
		case op <= 3 && next < len(stream):
			read()
		case op == 4:
			if q, e, delivery, ok := b.take(); ok {
				if delivery > maxDeliveries {
					running = append(running, call{eid: e.eid, e: e, ok: true}) // a dead letter
				} else {
					running = append(running, call{eid: e.eid, e: e, ok: r.IntN(3) > 0})
				}
				_ = q
			}
		case op == 5 && len(running) > 0:
			i := r.IntN(len(running))
			c := running[i]
			running = append(running[:i], running[i+1:]...)
			if c.ok {
				done[c.e.m.Sequence] = true
				b.done(c.eid)
			} else {
				b.failed(c.eid, "boom")
				b.hold(c.eid)
				holding = append(holding, c.eid)
			}
		case op == 6 && len(holding) > 0:
			i := r.IntN(len(holding))
			b.retry(holding[i])
			holding = append(holding[:i], holding[i+1:]...)
		case op == 7 || op == 8:
			c := b.cursor()
			check(c)
			committed = c
		case op == 9 && r.IntN(4) == 0:
			restart()
		}
	}
	// Drain: every handler succeeds from now on.
	for _, eid := range holding {
		b.retry(eid)
	}
	for _, c := range running {
		done[c.e.m.Sequence] = true
		b.done(c.eid)
	}
	for next < len(stream) {
		read()
	}
	for {
		_, e, _, ok := b.take()
		if !ok {
			break
		}
		done[e.m.Sequence] = true
		b.done(e.eid)
	}
	c := b.cursor()
	check(c)
	if !b.idle() || len(c.Pending) != 0 {
		t.Fatalf("not idle at the end: queued %d, cursor %+v", b.queued, c)
	}
	for _, m := range stream {
		if !done[m.seq] {
			t.Fatalf("message %d of %s never finished", m.seq, m.eid)
		}
	}
	if len(stream) > 0 && c.Seq < stream[len(stream)-1].seq {
		t.Fatalf("the mark %d stops before the last message %d", c.Seq, stream[len(stream)-1].seq)
	}
}
