package mailbox

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/ownership"
)

// ListOptions selects the ids List returns. The filters combine: an id is
// listed when it passes every filter that is set. With none set, List
// returns every id the world knows: each id with an ownership record,
// messages in its mailbox or dead letters.
type ListOptions struct {
	HeldBy string // only ids whose live ownership record names this node
	// WithMail: only ids with messages waiting in their mailbox (after
	// the id's cursor; committed messages not yet purged do not count).
	WithMail bool
	Dead     bool // only ids with dead letters
	// After resumes a listing: only ids sorted after this one (ids sort
	// by their UTF-8 bytes). Empty starts at the first id.
	After string
	Limit int // at most this many ids; 1 or more
}

// ListEntry is one id of a listing.
type ListEntry struct {
	ID string
	// Owner is the id's ownership: Held with the holder, node and expiry,
	// or not held with the last epoch (0: the id has no record).
	Owner ownership.Status
	// Depth is the number of messages waiting in the id's mailbox after
	// its cursor, as Stat and WorldStat count them.
	Depth uint64
	// CommittedStored is the number of committed messages (at or below
	// the cursor) still stored in the id's mailbox, waiting for their
	// purge.
	CommittedStored uint64
	DeadLetters     uint64
	// Err is set when the id's ownership record (or the node lease that
	// backs it) does not decode: Owner holds only ID and Revision.
	Err error
}

// ListPage is one page of a listing, sorted by id.
type ListPage struct {
	Entries []ListEntry
	// More says that the listing was cut at the limit: more ids pass the
	// filters. List on with After = Next (the last entry's id).
	More bool
	Next string
	// Skipped counts the mailbox and dead-letter subjects and the record
	// keys whose token is not the canonical encoding of an id: no id has
	// them (the unroutable messages of docs/wire.md, counted by WorldStat).
	Skipped int
}

// List returns a page of the world's ids, sorted by id, with each id's
// ownership, mailbox depth and dead letters (docs/design.md section 5,
// "Listing ids").
//
// Memory does not grow with the number of ownership records: they are
// streamed (ownership.Store.ScanRecords) and only the page is kept, a
// heap of Limit+1 ids. The mailbox and dead-letter counts come from one
// stream info of the mailbox stream (a map of subject to count that the
// server answers in pages of 100,000 subjects), held while the page is
// built: memory grows with the ids that have mail or dead letters, not
// with every id. With WithMail or Dead and no HeldBy, the records are not
// scanned at all: each listed id's record is read alone.
//
// Depth counts from each id's cursor (splitAtCursors): for the listed ids
// only, unless WithMail, which reads the cursors of the ids with stored
// mail in id order until the page is full.
//
// Every page reads the world again, so a listing paged with After sees
// ids added or removed between pages, never one id twice.
func (a *Admin) List(ctx context.Context, o ListOptions) (ListPage, error) {
	var page ListPage
	if o.Limit < 1 {
		return page, fmt.Errorf("%w: list limit %d: list at least 1 id", ErrInvalidOption, o.Limit)
	}
	if o.HeldBy != "" {
		if err := wire.ValidateNode(o.HeldBy); err != nil {
			return page, err
		}
	}
	if o.After != "" {
		if err := wire.ValidateID(o.After); err != nil {
			return page, fmt.Errorf("list after: %w", err)
		}
	}
	counts, skipped, err := a.mailCounts(ctx)
	if err != nil {
		return page, err
	}
	page.Skipped = skipped
	// Until the cursors are read, an entry's Depth is what its mailbox
	// stores: WithMail passes it when that is not 0, and split decides.
	pass := func(e ListEntry) bool {
		switch {
		case o.HeldBy != "" && (e.Err != nil || !e.Owner.Held || e.Owner.Node != o.HeldBy):
			return false
		case o.WithMail && e.Depth == 0, o.Dead && e.DeadLetters == 0:
			return false
		}
		return true
	}
	keep := o.Limit
	if o.WithMail {
		keep = len(counts) // every candidate: ids with stored mail
	}
	sel := &selection{after: o.After, limit: keep, in: make(map[string]bool)}
	scan := o.HeldBy != "" || !o.WithMail && !o.Dead
	// A sharded world: its records are its shards' (client.World.
	// ListShards lists them), its ids those with mail or dead letters,
	// each owned by its shard's record.
	owners, err := a.readShardOwners(ctx)
	if err != nil {
		return page, err
	}
	if owners != nil {
		scan = false
	}
	if scan {
		st, err := a.own.ScanRecords(ctx, func(l ownership.Listed) error {
			e := ListEntry{ID: l.ID, Owner: l.Status, Err: l.Err}
			if c := counts[l.ID]; c != nil {
				c.record = true
				e.Depth, e.DeadLetters = c.depth, c.dead
			}
			if pass(e) {
				sel.offer(e)
			}
			return nil
		})
		if err != nil {
			return page, err
		}
		page.Skipped += st.Skipped
	}
	if o.HeldBy == "" || owners != nil { // ids with mail or dead letters and no record
		for id, c := range counts {
			if c.record {
				continue // listed by the scan
			}
			e := ListEntry{ID: id, Owner: ownership.Status{ID: id}, Depth: c.depth, DeadLetters: c.dead}
			if owners != nil {
				e.Owner, e.Err = owners.of(id)
			}
			if pass(e) {
				sel.offer(e)
			}
		}
	}
	if page.Entries, err = a.splitPage(ctx, sel.sorted(), o); err != nil {
		return ListPage{}, err
	}
	if len(page.Entries) > o.Limit {
		page.Entries = page.Entries[:o.Limit]
		page.More, page.Next = true, page.Entries[o.Limit-1].ID
	}
	if !scan && owners == nil {
		if err := a.readOwners(ctx, page.Entries); err != nil {
			return ListPage{}, err
		}
	}
	return page, nil
}

// splitPage counts the depth of the entries from their cursors
// (splitAtCursors) and returns the first Limit+1 of them, the extra one
// telling whether the listing was cut. With WithMail, entries holds every
// candidate in id order, and those with nothing waiting are dropped: the
// cursors are read a page's worth at a time until Limit+1 are left or no
// candidate is.
func (a *Admin) splitPage(ctx context.Context, entries []ListEntry, o ListOptions) ([]ListEntry, error) {
	out := make([]ListEntry, 0, min(len(entries), o.Limit+1))
	for len(entries) > 0 && len(out) <= o.Limit {
		n := len(entries)
		if o.WithMail {
			n = min(n, o.Limit+1-len(out))
		}
		chunk := entries[:n]
		entries = entries[n:]
		stored := make(map[string]uint64, len(chunk))
		for _, e := range chunk {
			stored[e.ID] = e.Depth
		}
		split, err := a.splitAtCursors(ctx, stored)
		if err != nil {
			return nil, err
		}
		for _, e := range chunk {
			sp := split[e.ID]
			e.Depth, e.CommittedStored = sp.waiting, sp.committed
			if o.WithMail && e.Depth == 0 {
				continue
			}
			out = append(out, e)
		}
	}
	return out, nil
}

// readOwners reads the ownership record of each entry: one leader read
// per listed id, whatever the number of records in the world.
func (a *Admin) readOwners(ctx context.Context, entries []ListEntry) error {
	for i := range entries {
		e := &entries[i]
		st, err := a.own.Owner(ctx, e.ID)
		switch {
		case err == nil:
			e.Owner = st
		case errors.Is(err, wire.ErrCorruptRecord), errors.Is(err, wire.ErrUnknownVersion):
			e.Err = err
		default:
			return err
		}
	}
	return nil
}

// idCounts is what the mailbox stream holds for one id: messages in its
// mailbox (depth, committed ones included), dead letters.
type idCounts struct {
	depth, dead uint64
	record      bool // the record scan listed the id
}

// mailCounts reads the number of messages on every mailbox and
// dead-letter subject of the world, by id, and how many subjects name no
// id (the world's unroutable dead letters are not counted: they are the
// world's, not an id's; nor are the body parts of two-part dead letters,
// counted with their records).
func (a *Admin) mailCounts(ctx context.Context) (map[string]*idCounts, int, error) {
	info, err := handles.Of(a.w).Mailbox.Info(ctx, jetstream.WithSubjectFilter(wire.WorldFilter(a.world)))
	if err != nil {
		return nil, 0, fmt.Errorf("list: read the mailbox subjects of world %q: %w", a.world, err)
	}
	counts := make(map[string]*idCounts, len(info.State.Subjects))
	skipped := 0
	get := func(tok string) *idCounts {
		id, err := wire.DecodeID(tok)
		if err != nil {
			skipped++
			return nil
		}
		c := counts[id]
		if c == nil {
			c = &idCounts{}
			counts[id] = c
		}
		return c
	}
	for subj, n := range info.State.Subjects {
		if n == 0 {
			continue
		}
		if tok, ok := a.mailboxToken(subj); ok {
			if c := get(tok); c != nil {
				c.depth += n
			}
		} else if tok, ok := wire.DeadLetterToken(a.world, subj); ok && tok != wire.UnroutableToken && !wire.IsPartToken(tok) {
			if c := get(tok); c != nil {
				c.dead += n
			}
		}
	}
	return counts, skipped, nil
}

// selection keeps the limit+1 smallest ids after `after` that it is
// offered: a max-heap, so that a listing of any size costs memory for one
// page. The extra one tells whether the listing was cut.
type selection struct {
	after string
	limit int
	h     entryHeap
	in    map[string]bool // the ids in h
}

func (s *selection) offer(e ListEntry) {
	if s.after != "" && e.ID <= s.after {
		return
	}
	if s.in[e.ID] {
		// The same id twice (a record written again while the scan ran):
		// keep the later view.
		for i := range s.h {
			if s.h[i].ID == e.ID {
				s.h[i] = e
				return
			}
		}
	}
	if len(s.h) <= s.limit {
		heap.Push(&s.h, e)
		s.in[e.ID] = true
		return
	}
	if e.ID >= s.h[0].ID {
		return
	}
	delete(s.in, s.h[0].ID)
	s.h[0] = e
	s.in[e.ID] = true
	heap.Fix(&s.h, 0)
}

// sorted returns the kept entries in id order.
func (s *selection) sorted() []ListEntry {
	out := []ListEntry(s.h)
	slices.SortFunc(out, func(a, b ListEntry) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// entryHeap is a max-heap of entries by id.
type entryHeap []ListEntry

func (h entryHeap) Len() int           { return len(h) }
func (h entryHeap) Less(i, j int) bool { return h[i].ID > h[j].ID }
func (h entryHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *entryHeap) Push(x any)        { *h = append(*h, x.(ListEntry)) }
func (h *entryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}
