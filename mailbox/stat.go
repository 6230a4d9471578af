package mailbox

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/world"
)

// Stat is what one id's mailbox holds.
type Stat struct {
	ID    string
	Depth uint64 // messages waiting after the cursor
	// CommittedStored counts the messages at or below the cursor that are
	// still stored: committed, not yet purged (by the drain that committed
	// them, or fencepostd's purger). They take room; none is delivered
	// again.
	CommittedStored uint64
	// CommittedOldest is the posting time of the oldest of them; zero
	// when there is none.
	CommittedOldest time.Time
	Oldest          time.Time // posting time of the next message; zero when empty
	NextSeq         uint64    // sequence of the next message; 0 when empty
	Cursor          uint64    // last committed mailbox sequence
	Failures        int       // failed deliveries of the next message
	// Undeliverable: the next message ran out of deliveries and could not
	// be dead-lettered (its dead letters are full, or the server refused;
	// a WARN said why). It stays, and the next drain tries again without
	// calling the handler.
	Undeliverable bool
	DeadLetters   uint64
	Owner         ownership.Status
}

// Stat reads id's mailbox depth, oldest message, cursor, dead letters and
// owner. The counts come from direct reads and may lag a moment on a
// replicated stream.
func (a *Admin) Stat(ctx context.Context, id string) (Stat, error) {
	st := Stat{ID: id}
	unit, err := a.unit(id) // in a sharded world, the id's shard
	if err != nil {
		return st, err
	}
	owner, err := a.own.Owner(ctx, unit)
	if err != nil {
		return st, err
	}
	st.Owner = owner
	c, err := a.idCursor(ctx, id)
	if err != nil {
		return st, err
	}
	st.Cursor = c.Seq
	stream, subj := wire.MailboxStream(a.world), a.storedSubject(id)
	// All that is stored first: when its first message is after the
	// cursor (no committed one waits for its purge), that is the depth.
	all, err := jsapi.DirectGet(ctx, a.nc, stream, jsapi.GetRequest{Seq: 1, NextFor: subj, Batch: 1})
	if err != nil {
		return st, err
	}
	b := all
	if len(all.Msgs) > 0 && all.Msgs[0].Sequence <= c.Seq {
		if b, err = jsapi.DirectGet(ctx, a.nc, stream, jsapi.GetRequest{Seq: c.Seq + 1, NextFor: subj, Batch: 1}); err != nil {
			return st, err
		}
	}
	if len(b.Msgs) > 0 {
		st.Depth, st.Oldest, st.NextSeq = b.Pending+1, b.Msgs[0].Time, b.Msgs[0].Sequence
		st.Failures = c.FailuresOf(b.Msgs[0].Sequence)
		st.Undeliverable = st.Failures >= a.cfg.MaxDeliveries
	}
	if len(all.Msgs) > 0 {
		st.CommittedStored = all.Pending + 1 - min(all.Pending+1, st.Depth)
		if st.CommittedStored > 0 {
			// Committed messages are the front of the mailbox.
			st.CommittedOldest = all.Msgs[0].Time
		}
	}
	if b, err = jsapi.DirectGet(ctx, a.nc, stream, jsapi.GetRequest{Seq: 1, NextFor: wire.DeadLetterSubject(a.world, id), Batch: 1}); err != nil {
		return st, err
	}
	if len(b.Msgs) > 0 {
		st.DeadLetters = b.Pending + 1
	}
	return st, nil
}

// WorldStat sums up a world.
type WorldStat struct {
	IDs   int    // ids with messages waiting in their mailbox
	Depth uint64 // messages waiting in all mailboxes, each after its id's cursor
	// CommittedStored counts the messages of all mailboxes that are
	// committed (at or below their id's cursor) and still stored, waiting
	// for their purge: room taken, nothing to deliver.
	CommittedStored uint64
	// CommittedOldest is the posting time of the oldest of them, found
	// among the world's oldest 1,024 stored mailbox messages; zero when
	// none is stored, or none of those is committed (then every committed
	// message stored is younger than the 1,024th).
	CommittedOldest time.Time
	Owned           int    // ids with a live owner
	DeadLetters     uint64 // dead letters of all ids (one per dead letter, also one stored in two parts)
	// Unroutable counts the messages no id can drain: those waiting on a
	// mailbox subject whose token is no id's (until fencepostd's sweep
	// moves them) and those moved to the world's unroutable dead letters.
	Unroutable uint64
	// Unlisted: the world has more than 100,000 subjects, so they were
	// not listed one by one (seconds and hundreds of MB in the server at a
	// million): IDs and Depth come from the stream's counts, so they
	// count the committed messages not yet purged too (CommittedStored is
	// not counted, 0), and Unroutable counts only the messages moved to
	// the unroutable dead letters (those still waiting are counted in IDs
	// and Depth).
	Unlisted bool
}

// statListMax is the most subjects a world's WorldStat lists one by one.
var statListMax = 100_000

// WorldStat reads the world's totals. Depth counts the messages waiting
// in each mailbox after its id's cursor, as Stat of each id does: the
// committed messages still stored are CommittedStored, not depth. That
// costs a listing of the world's subjects, a read of the cursors (a
// thousand ids a read) and a read per id with a cursor and mail. Owned
// reads every ownership record: it costs one read per id ever owned.
func (a *Admin) WorldStat(ctx context.Context) (WorldStat, error) {
	ws, err := a.MailTotals(ctx)
	if err != nil {
		return ws, err
	}
	ws.Owned, err = a.own.CountHeld(ctx)
	return ws, err
}

// MailTotals is WorldStat without Owned (0): the mailbox figures alone,
// without a read of every ownership record.
func (a *Admin) MailTotals(ctx context.Context) (WorldStat, error) {
	var ws WorldStat
	// The dead-letter subjects (few, usually) are listed in any case.
	dl, err := handles.Of(a.w).Mailbox.Info(ctx, jetstream.WithSubjectFilter(wire.DeadLetterFilter(a.world)))
	if err != nil {
		return ws, err
	}
	if dl.State.NumSubjects > uint64(statListMax) {
		return a.countedWorldStat(dl.State)
	}
	info, err := handles.Of(a.w).Mailbox.Info(ctx, jetstream.WithSubjectFilter(wire.WorldFilter(a.world)))
	if err != nil {
		return ws, err
	}
	stored := map[string]uint64{}
	for subj, n := range info.State.Subjects {
		tok, isMailbox := a.mailboxToken(subj)
		dtok, isDead := wire.DeadLetterToken(a.world, subj)
		switch {
		case isDead && wire.IsPartToken(dtok):
			// The body parts of two-part dead letters: counted with
			// their records.
		case a.isUnroutable(subj), subj == wire.UnroutableSubject(a.world):
			ws.Unroutable += n
		case isMailbox:
			if id, err := wire.DecodeID(tok); err == nil {
				stored[id] += n
			}
		case isDead:
			ws.DeadLetters += n
		}
	}
	split, err := a.splitAtCursors(ctx, stored)
	if err != nil {
		return ws, err
	}
	for _, sp := range split {
		if sp.waiting > 0 {
			ws.IDs++
		}
		ws.Depth += sp.waiting
		ws.CommittedStored += sp.committed
	}
	if ws.CommittedStored > 0 {
		ws.CommittedOldest, err = a.oldestCommitted(ctx)
	}
	return ws, err
}

// countedWorldStat is WorldStat from the stream's counts, without a
// listing of every subject: st is the mailbox stream's state with the
// dead-letter subjects listed.
func (a *Admin) countedWorldStat(st jetstream.StreamState) (WorldStat, error) {
	c := world.CountMailboxes(a.world, st)
	return WorldStat{IDs: int(c.Mailboxes), Depth: c.Depth, DeadLetters: c.DeadLetters, Unroutable: c.Unroutable, Unlisted: true}, nil
}
