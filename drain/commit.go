package drain

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/store"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/world"
)

// commit writes the cursor with the fence and then purges what it covers.
// The broker stores the write only if the ownership record is still at the
// fence's revision. A refusal after a renewal (same node and epoch on the
// record) is retried with the new revision, once the drain has re-proved
// that it still holds its lock; any other refusal ends the drain with the
// ownership outcome, and nothing was removed.
func (r *run) commit(ctx context.Context, next wire.Cursor, acked, dead int) error {
	if r.d.beforeCommit != nil {
		r.d.beforeCommit(r.a.id, next)
	}
	if err := r.lk.check(ctx); err != nil {
		return err
	}
	// What the handler acknowledged is committed even when the caller is
	// cancelling (a lost lock was caught just above, and the fence catches
	// a lost holding): a cancelled publish would leave its outcome unknown.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.commitWait)
	defer cancel()
	if !r.a.valid() {
		if err := r.reauthorize(ctx); err != nil {
			return err
		}
		if !r.a.valid() {
			return &ownership.FreeError{ID: r.a.id, LastEpoch: r.a.epoch}
		}
	}
	data, err := wire.EncodeCursor(next)
	if err != nil {
		return err
	}
	// A run with state commits its writes in the same batch (state.go).
	w := r.resend
	if w == nil {
		w = r.st.writes()
	}
	for attempt := 1; ; attempt++ {
		ack, err := r.publish(ctx, data, w, attempt)
		if err == nil {
			r.st.confirm(w, next.Seq)
			if r.d.onCommit != nil {
				f := r.a.fence
				r.d.onCommit(Commit{ID: r.a.id, Node: f.Node, Epoch: f.Epoch, Revision: f.Revision, Cursor: next.Seq, StreamSeq: ack.Sequence})
			}
			break
		}
		if !store.WrongLastSequence(err) {
			return r.commitError(next, err)
		}
		if attempt >= maxCommitAttempts {
			return fmt.Errorf("%w: the ownership record of %q changed under %d commits in a row", ErrContended, r.a.id, attempt)
		}
		if err := r.reauthorize(ctx); err != nil {
			if errors.Is(err, ownership.ErrFenced) || errors.Is(err, ownership.ErrHeld) || errors.Is(err, ownership.ErrFree) {
				r.d.metrics.FencedCommit(r.d.world)
			}
			return err
		}
		if attempt > 1 {
			if err := store.Sleep(ctx, time.Duration(attempt)*time.Millisecond); err != nil {
				return err
			}
		}
	}
	r.cur, r.stored = next, next
	// The calls the commit covers are handled and committed: answered.
	r.answers.release(r.d, next.Seq)
	r.committed = time.Now()
	r.res.Cursor = next.Seq
	r.res.Acked += acked
	r.res.DeadLettered += dead
	r.res.Count += acked + dead
	r.purge(ctx)
	return nil
}

// reauthorize re-reads the record after a refused commit or a lapsed local
// deadline. It then renews the drain lock with a compare-and-swap: that
// write succeeds only if no drain took the lock over, and a takeover always
// precedes the record write that fences its victim, so a revision read here
// is never one that a takeover already fenced this drain out of.
func (r *run) reauthorize(ctx context.Context) error {
	if err := r.d.authorize(ctx, r.a); err != nil {
		return err
	}
	return r.lk.renew(ctx)
}

func (r *run) commitError(next wire.Cursor, err error) error {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) || errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) {
		return fmt.Errorf("drain: commit of %q refused by the server (nothing removed): %w", r.a.id, err)
	}
	r.uncertain = true
	return &UnknownError{ID: r.a.id, Cursor: next.Seq, Err: err}
}

// serverPurges says whether the world's committed messages are removed by
// fencepostd's purger (purge.Purger.PurgeCommitted) rather than by the
// drains: in such a world owners have no permission to purge
// (docs/security.md).
func (d *Drainer) serverPurges() bool { return d.cfg.Purge == world.PurgeByServer }

// purge removes the committed messages from the mailbox. It is cleanup
// only: delivery resumes after the cursor, so a purge that fails (or never
// runs) costs space, never a redelivery. It runs in the background, one at
// a time, while the drain reads and handles the next batch; a purge covers
// everything below the cursor, so one that is skipped because another is
// in flight is made up by the next. finishPurge waits for the last one.
func (r *run) purge(ctx context.Context) {
	if r.d.serverPurges() {
		return
	}
	if r.bg != nil {
		r.bg.request(r.d, r.subj, r.cur.Seq+1)
		return
	}
	if r.purging != nil {
		select {
		case res := <-r.purging:
			r.purged(res)
		default:
			return
		}
	}
	below := r.cur.Seq + 1
	if below <= r.purgedBelow {
		return
	}
	ch := make(chan purgeResult, 1)
	r.purging = ch
	go func() {
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		ch <- purgeResult{below, r.d.purge(pctx, r.subj, below)}
	}()
}

type purgeResult struct {
	below uint64
	err   error
}

func (r *run) purged(res purgeResult) {
	r.purging = nil
	if res.err != nil {
		r.d.log.Warn("drain: purge of committed messages failed; the next commit retries", "world", r.d.world, "id", r.a.id, "below", res.below, "error", res.err)
		return
	}
	r.purgedBelow = max(r.purgedBelow, res.below)
}

// finishPurge waits for the purge in flight and purges what the last
// commits covered.
func (r *run) finishPurge(ctx context.Context) {
	if r.bg != nil {
		return // a holding's purges run after the drain
	}
	if r.purging != nil {
		r.purged(<-r.purging)
	}
	r.purge(ctx)
	if r.purging != nil {
		r.purged(<-r.purging)
	}
}

// purgeLater is the purge of a holding's committed messages: it runs after
// the drains, not within them, at most one at a time, and a purge that
// starts waits for purgeDelay first, so that the commits of an id that
// gets mail often are removed by one purge (each purge of one subject of
// an interleaved stream costs the server a search: design.md 3.7).
type purgeLater struct {
	mu      sync.Mutex
	want    uint64 // purge below this
	done    uint64 // purged below this
	running bool
	// sweptAt: the sweeps' mark when the wait for them began.
	sweptAt uint64
}

// purgeDelay is how long a holding's purge waits for more commits.
const purgeDelay = 500 * time.Millisecond

func (p *purgeLater) request(d *Drainer, subj string, below uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.want = max(p.want, below)
	if p.running || p.want <= p.done {
		return
	}
	p.running = true
	delay := purgeDelay
	if sw := d.sweeper.Load(); sw != nil {
		delay, p.sweptAt = sweepGrace, sw.Swept()
	}
	time.AfterFunc(delay, func() { p.run(d, subj) })
}

// leaveToSweeps says whether a purge below `below` is left to the sweeps
// for another sweepGrace: they have not removed it yet, but their mark
// moved during the last wait (from sweptAt to swept). Only a mark that
// stopped moving (held back by an id nobody drains, or a sweeper that
// stopped) makes a holding purge its id alone. At scale the mark trails
// each commit by more than the grace while it moves steadily: 200,000 ids
// with one message each, drained at once by 4 workers, made 200,000 purges
// of one subject each (a search of the interleaved stream each) and
// saturated the server (bench/scale, docs/design/pipeline.md point 5).
func leaveToSweeps(sweptAt, swept, below uint64) bool {
	return swept < below && swept > sweptAt
}

func (p *purgeLater) run(d *Drainer, subj string) {
	for {
		p.mu.Lock()
		below := p.want
		if sw := d.sweeper.Load(); sw != nil {
			swept := sw.Swept()
			if swept >= below {
				p.done = max(p.done, below) // the sweeps removed them
			} else if leaveToSweeps(p.sweptAt, swept, below) {
				p.sweptAt = swept
				p.mu.Unlock()
				time.AfterFunc(sweepGrace, func() { p.run(d, subj) })
				return
			}
		}
		if below <= p.done || d.nc.IsClosed() {
			// Done, or the drainer's connection closed (its worker
			// stopped): whoever drains the id next purges.
			p.running = false
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := d.purge(ctx, subj, below)
		cancel()
		p.mu.Lock()
		if err != nil {
			p.running = false
			p.mu.Unlock()
			d.log.Warn("drain: purge of committed messages failed; the next commit retries", "world", d.world, "subject", subj, "below", below, "error", err)
			return
		}
		p.done = max(p.done, below)
		p.mu.Unlock()
	}
}

// purge removes the mailbox's messages on subj (an id's subject, or the
// world's filter) below sequence below.
func (d *Drainer) purge(ctx context.Context, subj string, below uint64) error {
	return jsapi.Purge(ctx, d.nc, wire.MailboxStream(d.world), subj, below)
}
