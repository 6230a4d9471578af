package purge

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/store"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/world"
)

// Refusal is why PurgeCommitted refused a cursor entry (and purged nothing
// for it).
type Refusal int

const (
	// RefusedBadKey: the token of the key c.<token> is not the canonical
	// encoding of an id (a literal '*' or '>', padding, a non-canonical
	// form, ...), so it names no mailbox.
	RefusedBadKey Refusal = iota + 1
	// RefusedForged: the cursor's seq is above the mailbox stream's last
	// sequence, which no commit can have written.
	RefusedForged
)

func (r Refusal) String() string {
	switch r {
	case RefusedBadKey:
		return "bad_key"
	case RefusedForged:
		return "forged"
	}
	return fmt.Sprintf("Refusal(%d)", int(r))
}

// PurgeOption configures PurgeCommitted.
type PurgeOption func(*purgeOptions)

type purgeOptions struct {
	onRefusal func(Refusal)
	judge     Judge
}

// Judge says whether revision rev of cursor key may be purged below: false
// for a cursor its caller knows to be forged (fencepostd's auditor knows
// who wrote each cursor of its world, and one written by another node's
// owner is). An error leaves it unjudged: the purge is tried again later.
type Judge func(ctx context.Context, key string, rev uint64) (bool, error)

// WithJudge has PurgeCommitted ask j about each cursor before it purges
// below it, besides its own checks.
func WithJudge(j Judge) PurgeOption {
	return func(o *purgeOptions) { o.judge = j }
}

// OnRefusal has PurgeCommitted call f once for each key revision it
// refuses (a run that starts again sees the current revision of each key
// once more). f may be called from more than one goroutine at a time.
func OnRefusal(f func(Refusal)) PurgeOption {
	return func(o *purgeOptions) { o.onRefusal = f }
}

// cursorEntry is one revision of a cursor key whose token decodes to an
// id (or, in a sharded world, names one of its shards).
type cursorEntry struct {
	key   string // c.<token>
	subj  string // the id's mailbox subject, or the shard's stored subjects
	rev   uint64 // of the key
	top   uint64 // the highest stream sequence the cursor names
	below uint64 // the cursor covers every message of subj below it
	value []byte
}

// cursorEntryOf reads one revision of a cursor key of world w: an id's
// cursor (c.<eid>) in a per-id world, a shard's (the key of unit
// shard/<q>, wire.ShardCursor) in a sharded one. A key that names no
// mailbox of the world is refused (RefusedBadKey).
func cursorEntryOf(w *world.World, key string, rev uint64, value []byte) (cursorEntry, Refusal, error) {
	token := strings.TrimPrefix(key, wire.CursorPrefix)
	e := cursorEntry{key: key, rev: rev, value: value}
	id, err := wire.DecodeID(token)
	if err != nil {
		return e, RefusedBadKey, err
	}
	if n := w.Config.Shards; n > 0 {
		q, ok := wire.UnitShard(id, n)
		if !ok {
			return e, RefusedBadKey, fmt.Errorf("%q is not a shard of the world's %d", id, n)
		}
		c, err := wire.DecodeShardCursor(value)
		if err != nil {
			return e, 0, err
		}
		// Every pending id's seq is at or below the mark
		// (DecodeShardCursor refuses others).
		e.subj, e.top, e.below = wire.ShardFilter(w.Name, q), c.Seq, c.Low()
		return e, 0, nil
	}
	c, err := wire.DecodeCursor(value)
	if err != nil {
		return e, 0, err
	}
	e.subj, e.top, e.below = wire.MailboxSubject(w.Name, id), c.Seq, c.Seq+1
	return e, 0, nil
}

// PurgeCommitted removes committed messages from the world's mailboxes
// until ctx ends: it follows every stored cursor (c.<id>) and purges id's
// mailbox below it; in a sharded world, every shard's cursor (the key of
// unit shard/<q>), and purges the shard's stored mail below its Low, as
// the shard's holder does where owners may purge (design 3.14).
// fencepostd runs it for the worlds whose config says purge=server, so
// that owners, who may not call the purge API there, never need to.
//
// Only what a stored cursor covers is removed, as with a drain's own purge
// (design.md 3.4): a cursor is stored only by a fenced commit of the
// current holder, and delivery resumes after it, so a purge that is late or
// never runs costs space, never a redelivery or a loss. Cursor updates that
// arrive while a purge runs are merged, so the purger keeps up with any
// commit rate at the cost of some delay.
//
// The owner role may publish to any key under c.>, so the purger does not
// take an entry on trust:
//
//   - The purge subject is built only as wire.MailboxSubject of the id the
//     key's token decodes to (wire.DecodeID: canonical encodings only). A
//     key that decodes to no id (c.* with a literal '*', which as a purge
//     filter would match every mailbox) is logged at WARN, counted
//     (RefusedBadKey) and never purged for.
//   - A cursor is refused when its seq is above the mailbox stream's last
//     sequence: a genuine cursor covers a message that was stored before the
//     commit, and stream sequences only grow (a reset keeps them growing),
//     so every later read of the last sequence is at least its seq. The last
//     sequence is cached and read again only when a cursor exceeds it. Such
//     a forged cursor is logged at WARN, counted (RefusedForged) and never
//     purged for; it would also make the id's drains skip every message
//     posted until the stream passes it, so the purger repairs the key with
//     a compare-and-swap at the forged revision: back to the last value it
//     saw for the key within the stream, or deleted (cursor 0) if it saw
//     none. A swap that fails means the key changed meanwhile (the holder
//     committed): that newer revision is judged on its own.
//
// The repair never blocks a holder: commits are fenced on the ownership
// record (o.<id>), not on the cursor key, so the next commit overwrites the
// repaired key whatever its revision. Nor can it lose a message: an older
// cursor (or none) only makes the next drain start earlier, delivering
// again what the cursor above it covered (at least once), and a message is
// purged only below a cursor judged genuine. A cursor at or below the last
// sequence that no commit wrote cannot be told from a genuine one here;
// keeping owners from writing other ids' cursors is the permissions' job.
func (p *Purger) PurgeCommitted(ctx context.Context, opts ...PurgeOption) error {
	var o purgeOptions
	for _, opt := range opts {
		opt(&o)
	}
	refused := func(r Refusal) {
		if o.onRefusal != nil {
			o.onRefusal(r)
		}
	}
	w, err := handles.Of(p.w).KV.Watch(ctx, wire.CursorPrefix+"*", jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("purge: purger of %q: watch cursors: %w", p.world, err)
	}
	defer w.Stop()
	var (
		mu      sync.Mutex
		pending = map[string]cursorEntry{} // key -> its latest revision not yet acted on
		wake    = make(chan struct{}, 1)
		ended   = make(chan struct{})
	)
	poke := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	// requeue puts e back unless a newer revision of its key is pending.
	// Called with mu held.
	requeue := func(e cursorEntry) {
		if q, ok := pending[e.key]; !ok || q.rev < e.rev {
			pending[e.key] = e
		}
	}
	go func() {
		defer close(ended)
		for e := range w.Updates() {
			if e == nil {
				continue // the end of the initial values
			}
			ce, refusal, err := cursorEntryOf(p.w, e.Key(), e.Revision(), e.Value())
			switch {
			case refusal == RefusedBadKey:
				p.log.Warn("purge: cursor key names no mailbox of the world; nothing purged for it", "world", p.world, "key", e.Key(), "revision", e.Revision(), "reason", err)
				refused(RefusedBadKey)
				continue
			case err != nil:
				p.log.Warn("purge: unreadable cursor left alone", "world", p.world, "key", e.Key(), "error", err)
				continue
			}
			mu.Lock()
			requeue(ce)
			mu.Unlock()
			poke()
		}
	}()
	var (
		lastSeq uint64                     // the mailbox stream's last sequence, as last read
		genuine = map[string]cursorEntry{} // key -> the latest revision seen within lastSeq
		done    = map[string]uint64{}      // key -> purged below
		warned  = map[string]uint64{}      // key -> the forged revision last reported
		// forged judges e; the judgement of a revision sticks, so that the
		// stream growing past a forged cursor before its repair succeeds
		// never makes it purge.
		forged = func(e cursorEntry) bool { return warned[e.key] == e.rev || e.top > lastSeq }
		retry  bool
	)
	for {
		if retry {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(time.Second):
			}
			poke()
			retry = false
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ended:
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("purge: purger of %q: the watch of the cursors ended", p.world)
		case <-wake:
		}
		mu.Lock()
		batch := pending
		pending = map[string]cursorEntry{}
		mu.Unlock()
		var top uint64
		for _, e := range batch {
			top = max(top, e.top)
		}
		if top > lastSeq {
			ictx, cancel := context.WithTimeout(ctx, 10*time.Second)
			info, err := handles.Of(p.w).Mailbox.Info(ictx)
			cancel()
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				p.log.Warn("purge: read of the mailbox stream's last sequence failed; retrying", "world", p.world, "error", err)
				mu.Lock()
				for _, e := range batch {
					requeue(e)
				}
				mu.Unlock()
				retry = true
				continue
			}
			lastSeq = max(lastSeq, info.State.LastSeq)
		}
		var purges, repairs []cursorEntry
		for key, e := range batch {
			if forged(e) {
				if warned[key] != e.rev {
					warned[key] = e.rev
					p.log.Warn("purge: cursor above the mailbox stream's last sequence, which no commit writes; nothing purged, the key is repaired",
						"world", p.world, "key", key, "revision", e.rev, "seq", e.top, "last_seq", lastSeq)
					refused(RefusedForged)
				}
				repairs = append(repairs, e)
				continue
			}
			genuine[key] = e
			if e.below > done[key] {
				purges = append(purges, e)
			}
		}
		var failed, judged []cursorEntry
		var fmu sync.Mutex
		store.Parallel(parallelPurges, len(purges), func(i int) {
			e := purges[i]
			pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if o.judge != nil {
				ok, err := o.judge(pctx, e.key, e.rev)
				if err != nil || !ok {
					if err != nil && ctx.Err() == nil {
						p.log.Warn("purge: a cursor's judgement failed; retrying", "world", p.world, "key", e.key, "revision", e.rev, "error", err)
					} else if err == nil {
						p.log.Info("purge: cursor judged forged or superseded; nothing purged for it", "world", p.world, "key", e.key, "revision", e.rev)
					}
					fmu.Lock()
					if err != nil {
						failed = append(failed, e)
					} else {
						judged = append(judged, e)
					}
					fmu.Unlock()
					return
				}
			}
			err := jsapi.Purge(pctx, handles.Of(p.w).JS.Conn(), wire.MailboxStream(p.world), e.subj, e.below)
			if err != nil {
				if !errors.Is(err, context.Canceled) {
					p.log.Warn("purge: purge of committed messages failed; retrying", "world", p.world, "subject", e.subj, "error", err)
				}
				fmu.Lock()
				failed = append(failed, e)
				fmu.Unlock()
			}
		})
		notPurged := map[string]bool{}
		for _, e := range judged {
			// Forged, or superseded by a newer revision (which the
			// watch brings too): neither purged for nor restored to.
			notPurged[e.key] = true
			if genuine[e.key].rev == e.rev {
				delete(genuine, e.key)
			}
		}
		for _, e := range failed {
			notPurged[e.key] = true
		}
		for _, e := range purges {
			if !notPurged[e.key] {
				done[e.key] = max(done[e.key], e.below)
			}
		}
		for _, e := range repairs {
			if err := p.repairCursor(ctx, e, genuine); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				p.log.Warn("purge: repair of a forged cursor failed; retrying", "world", p.world, "key", e.key, "revision", e.rev, "error", err)
				failed = append(failed, e)
			}
		}
		mu.Lock()
		for _, e := range failed {
			if !forged(e) {
				delete(done, e.key)
			}
			requeue(e)
		}
		mu.Unlock()
		retry = len(failed) > 0
	}
}

// repairCursor rewrites the forged revision e of a cursor key, by
// compare-and-swap at e.rev, to the last revision seen within the stream
// (genuine), or deletes it when there was none. A swap refused because the
// key moved on is not an error: the newer revision is judged on its own.
func (p *Purger) repairCursor(ctx context.Context, e cursorEntry, genuine map[string]cursorEntry) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	g, restore := genuine[e.key]
	var err error
	if restore {
		_, err = handles.Of(p.w).KV.Update(ctx, e.key, g.value, e.rev)
	} else {
		err = handles.Of(p.w).KV.Delete(ctx, e.key, jetstream.LastRevision(e.rev))
	}
	switch {
	case err == nil && restore:
		p.log.Warn("purge: forged cursor restored to the last one seen", "world", p.world, "key", e.key, "seq", g.top, "forged_seq", e.top)
	case err == nil:
		p.log.Warn("purge: forged cursor deleted (none seen before it): the next drain starts at the oldest message", "world", p.world, "key", e.key, "forged_seq", e.top)
	case errors.Is(err, jetstream.ErrKeyRevisionMismatch) || store.WrongLastSequence(err):
		p.log.Info("purge: forged cursor already overwritten; left alone", "world", p.world, "key", e.key, "revision", e.rev)
		return nil
	}
	return err
}
