package ownership

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/wire"
)

// Listed is one ownership record as a scan reads it.
type Listed struct {
	// Status is what Owner would answer for the id at the moment the scan
	// judged the record: Held with the holder, or the last epoch.
	Status
	// Err is set when the record (or the node lease that backs it) does
	// not decode (wire.ErrCorruptRecord, wire.ErrUnknownVersion): Status
	// then holds only ID and Revision, and nothing is guessed (fail closed).
	Err error
}

// ScanStats counts what a scan met.
type ScanStats struct {
	Records int // records passed to the callback
	// Skipped counts the record keys whose token is not the canonical
	// encoding of an id (wire.DecodeID): no id has them, and no operation
	// of this package reads or writes them. Nothing but a foreign writer
	// makes one.
	Skipped int
}

// ScanRecords calls fn once for every id that has an ownership record in
// the world (a deleted record is not one), in no particular order, and
// stops at the first error fn returns.
//
// The records are streamed: one ordered consumer over the record keys,
// delivering the last value of each, so memory does not grow with the
// number of ids. Each record is judged live or not when it arrives; a
// record backed by a node lease is judged with that node lease, read once
// per node (and again when the copy read has lapsed, so a long scan does
// not count a renewed node as gone). The scan is not a snapshot: a record
// written after the scan started may be seen in its old or its new state.
// Reads may lag a moment on a replicated world; the answer is for
// listings, never for a decision (use Owner, or the write that decides).
func (s *Store) ScanRecords(ctx context.Context, fn func(Listed) error) (ScanStats, error) {
	var st ScanStats
	w, err := s.kv.WatchFiltered(ctx, []string{wire.RecordPrefix + "*"}, jetstream.IgnoreDeletes())
	if err != nil {
		return st, fmt.Errorf("ownership: list records: %w", err)
	}
	defer w.Stop()
	nodes := make(map[string]nodeRead)
	for {
		var e jetstream.KeyValueEntry
		var ok bool
		select {
		case e, ok = <-w.Updates():
		case <-ctx.Done():
			return st, fmt.Errorf("ownership: list records: %w", ctx.Err())
		}
		if !ok {
			if ctx.Err() != nil {
				return st, fmt.Errorf("ownership: list records: %w", ctx.Err())
			}
			return st, fmt.Errorf("ownership: list records: the watch ended early")
		}
		if e == nil { // every record present at the start was delivered
			return st, nil
		}
		id, err := wire.DecodeID(strings.TrimPrefix(e.Key(), wire.RecordPrefix)) // a key, not a subject
		if err != nil {
			st.Skipped++
			continue
		}
		l, err := s.listed(ctx, id, e, nodes)
		if err != nil {
			return st, err
		}
		st.Records++
		if err := fn(l); err != nil {
			return st, err
		}
	}
}

// nodeRead is a node lease as a scan read it.
type nodeRead struct {
	v   view
	err error // the node lease does not decode
}

// listed judges one record of a scan.
func (s *Store) listed(ctx context.Context, id string, e jetstream.KeyValueEntry, nodes map[string]nodeRead) (Listed, error) {
	v := view{rev: e.Revision()}
	rec, err := wire.DecodeRecord(e.Value())
	if err != nil {
		return Listed{Status: Status{ID: id, Revision: v.rev}, Err: fmt.Errorf("ownership: record of %q at revision %d: %w", id, v.rev, err)}, nil
	}
	v.rec = rec
	now := time.Now()
	if rec.Backed() {
		nr, seen := nodes[rec.Node]
		if !seen || nr.err == nil && nr.v.present() && !nr.v.rec.Live(now) {
			// Never read, or read and lapsed since: it may have been renewed.
			nv, err := s.readNode(ctx, "list", rec.Node)
			if err != nil && !isUndecodable(err) {
				return Listed{}, err
			}
			nr = nodeRead{v: nv, err: err}
			nodes[rec.Node] = nr
			now = time.Now()
		}
		if nr.err != nil {
			return Listed{Status: Status{ID: id, Revision: v.rev}, Err: nr.err}, nil
		}
		if nr.v.present() {
			v.nl, v.nlRev = &nr.v.rec, nr.v.rev
		}
	}
	return Listed{Status: s.status(id, v, now)}, nil
}

// isUndecodable reports whether err is a record that does not decode,
// rather than a read that failed.
func isUndecodable(err error) bool {
	return errors.Is(err, wire.ErrCorruptRecord) || errors.Is(err, wire.ErrUnknownVersion)
}
