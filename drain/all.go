package drain

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/store"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/ownership"
)

// DefaultParallel is how many ids DrainAll prepares and finishes at once.
// Each id's start (a holder check, a lock write) and end (a commit, the
// lock's delete) are requests that wait for their answers: with more in
// flight the server answers them in fewer, larger writes. 10,000 ids took
// 1.50-1.52 s at 32, 1.27-1.35 s at 128 and 1.22-1.26 s at 256
// (BenchmarkDrainManyIDs, design.md 3.7).
const DefaultParallel = 256

// DrainAll drains the mailboxes of many ids held by one node (every id a
// node owns, say) and returns the sum of their results and the errors of
// the ids that did not drain (each naming its id; errors.Is and errors.As
// see through them).
//
// Each id gets what DrainLease gives it: the holder check, its own lock,
// fenced commits, in-order delivery. The difference is the read: reading
// many small mailboxes one subject at a time makes the server search the
// stream for each subject, which costs about the whole stream per id when
// the ids' messages are interleaved. DrainAll instead reads the world's
// mailboxes once, in stream order, through one consumer that exists for
// the duration of the call, and hands each message of a held id to h (from
// one goroutine). An id whose handler fails is taken out of the scan at
// that message and goes on alone, with backoff, after it; so are all ids
// on a replicated stream, to confirm with the leader that nothing is left.
func (d *Drainer) DrainAll(ctx context.Context, leases []*ownership.Lease, h Handler, opts ...RunOption) (total Result, _ error) {
	defer d.observe(time.Now(), &total)
	runs := make([]*run, len(leases))
	errs := make([]error, len(leases))
	store.Parallel(DefaultParallel, len(leases), func(i int) {
		l := leases[i]
		a := &authority{id: l.ID, node: l.Node, epoch: l.Epoch, ttl: l.TTL, until: l.ValidUntil(), priorUntil: l.PriorUntil}
		runs[i], errs[i] = d.begin(ctx, a, h, opts, d.cfg.Replicas > 1)
	})
	if d.cfg.Replicas == 1 {
		d.readCursors(ctx, runs, errs)
	}
	var live []*run
	for _, r := range runs {
		if r != nil {
			r.scanNext = r.cur
			live = append(live, r)
		}
	}
	var g sweep
	scanErr := d.scan(ctx, live, &g)
	results := make([]Result, len(leases))
	store.Parallel(DefaultParallel, len(leases), func(i int) {
		if r := runs[i]; r != nil {
			results[i], errs[i] = r.finishAll(ctx, scanErr)
		}
	})
	d.sweep(ctx, live, g)
	var out []error
	for i, res := range results {
		total.Count += res.Count
		total.Acked += res.Acked
		total.DeadLettered += res.DeadLettered
		total.Deliveries += res.Deliveries
		if errs[i] != nil {
			out = append(out, fmt.Errorf("drain %q: %w", leases[i].ID, errs[i]))
		}
	}
	return total, errors.Join(out...)
}

// readCursors reads the cursors of started runs, a thousand per request,
// after their locks were taken. A single replica answers direct gets from
// the state every write is checked against, so this is the same read as
// the per-id one; replicated worlds read each cursor from the leader in
// begin. A run whose cursor cannot be read ends with that error.
func (d *Drainer) readCursors(ctx context.Context, runs []*run, errs []error) {
	bySubj := map[string]int{}
	var subjects []string
	flush := func() {
		if len(subjects) == 0 {
			return
		}
		b, err := readLast(ctx, d.nc, wire.BucketStream(d.world), subjects)
		if err == nil {
			for _, m := range b.msgs {
				r := runs[bySubj[m.Subject]]
				if jsapi.IsMarker(m.Header) {
					continue
				}
				if r.cur, err = wire.DecodeCursor(m.Data); err != nil {
					i := bySubj[m.Subject]
					_, errs[i] = r.end(ctx, fmt.Errorf("drain: cursor of %q: %w", r.a.id, err))
					runs[i] = nil
				}
			}
			err = nil
		}
		for _, s := range subjects {
			if i := bySubj[s]; err != nil && runs[i] != nil {
				_, errs[i] = runs[i].end(ctx, err)
				runs[i] = nil
			} else if runs[i] != nil {
				runs[i].res.Cursor = runs[i].cur.Seq
			}
		}
		subjects = subjects[:0]
		clear(bySubj)
	}
	for i, r := range runs {
		if r == nil {
			continue
		}
		bySubj[r.cursorSubj] = i
		subjects = append(subjects, r.cursorSubj)
		if len(subjects) == maxMultiLast {
			flush()
		}
	}
	flush()
}

// sweep is what the scan saw, for the one purge that removes what the
// drained ids committed: every mailbox message up to last, except from
// blocked (the first message of an id that is not drained) on.
type sweep struct {
	last    uint64
	blocked uint64 // 0: none
}

// maxScanned bounds the sequences one id's scan remembers for the sweep.
const maxScanned = 4096

// scan reads the world's mailboxes once, from the start, and delivers
// every message of a run that is still in the scan.
func (d *Drainer) scan(ctx context.Context, runs []*run, g *sweep) error {
	if len(runs) == 0 {
		return nil
	}
	bySubj := make(map[string]*run, len(runs))
	for _, r := range runs {
		bySubj[r.subj] = r
		r.deferPurge = true
	}
	cons, err := handles.Of(d.w).Mailbox.CreateConsumer(ctx, jetstream.ConsumerConfig{
		FilterSubject:     wire.MailboxFilter(d.world),
		DeliverPolicy:     jetstream.DeliverAllPolicy,
		AckPolicy:         jetstream.AckNonePolicy,
		MemoryStorage:     true,
		Replicas:          1,
		InactiveThreshold: max(d.lockTTL, 10*time.Second),
		Description:       "fencepost drain of many ids",
	})
	if err != nil {
		return fmt.Errorf("drain: scan mailboxes: %w", err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = handles.Of(d.w).Mailbox.DeleteConsumer(dctx, cons.CachedInfo().Name)
	}()
	if cons.CachedInfo().NumPending == 0 {
		return nil
	}
	msgs, err := readConsumer(d.nc, cons, jetstream.PullMaxMessages(2*d.batch))
	if err != nil {
		return fmt.Errorf("drain: scan mailboxes: %w", err)
	}
	defer msgs.iter.Stop()
	for left := uint64(1); left > 0; {
		m, md, err := msgs.next(ctx)
		if errors.Is(err, errConsumerGap) {
			// Messages after the last one seen may have been lost on the
			// way: every run goes on alone from what it has (finishAll),
			// and the sweep stops at what the scan saw.
			for _, r := range runs {
				r.diverted = true
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("drain: scan mailboxes: %w", err)
		}
		left = md.NumPending
		seq := md.Sequence.Stream
		r := bySubj[m.Subject()]
		switch {
		case r == nil || len(r.scanned) >= maxScanned:
			// Another id's message, or more than the sweep tracks: the
			// sweep stops below it.
			if g.blocked == 0 {
				g.blocked = seq
			}
			if r == nil {
				continue
			}
		default:
			r.scanned = append(r.scanned, seq)
		}
		g.last = seq
		if r.diverted || seq <= r.scanNext.Seq {
			continue
		}
		r.scanOne(&jetstream.RawStreamMsg{Subject: m.Subject(), Sequence: md.Sequence.Stream, Header: m.Headers(), Data: m.Data(), Time: md.Timestamp})
		if r.scanAcked+r.scanDead >= d.batch && !r.diverted {
			if err := r.flushScan(); err != nil {
				r.scanErr, r.diverted = err, true
			}
		}
	}
	return nil
}

// scanOne delivers one message of the scan to the run's handler, with the
// rules of handle; a failure below the limit takes the run out of the scan.
func (r *run) scanOne(m *jetstream.RawStreamMsg) {
	// A run whose authority ran out leaves the scan: it goes on alone,
	// where handle reads the record again before it hands out anything.
	if r.ctx.Err() != nil || !r.a.valid() || (r.o.max > 0 && r.res.Count+r.scanAcked+r.scanDead >= r.o.max) {
		r.diverted = true
		return
	}
	delivery := r.cur.FailuresOf(m.Sequence) + 1
	if delivery > r.d.cfg.MaxDeliveries {
		r.diverted = true // handle dead-letters it, without another call
		return
	}
	r.res.Deliveries++
	msg := r.message(m, delivery)
	herr := r.h(r.ctx, msg)
	if herr == nil {
		herr = r.replied(msg) // as handle's
	}
	switch {
	case herr == nil:
		r.scanNext, r.scanAcked = wire.Cursor{Seq: m.Sequence}, r.scanAcked+1
	case r.ctx.Err() != nil:
		r.diverted, r.interrupted = true, true // as handle's
	case delivery >= r.d.cfg.MaxDeliveries:
		if err := r.deadLetter(r.ctx, m, delivery, herr.Error()); err != nil {
			// Keep the count, and go on alone: handle tries the
			// dead-lettering again without another call.
			r.scanFail = &wire.Cursor{Seq: r.scanNext.Seq, Head: m.Sequence, Failures: delivery, Error: store.Clip(herr.Error())}
			r.diverted = true
			return
		}
		r.deadLettered(m, herr.Error())
		r.scanNext, r.scanDead = wire.Cursor{Seq: m.Sequence}, r.scanDead+1
	default:
		r.scanFail = &wire.Cursor{Seq: r.scanNext.Seq, Head: m.Sequence, Failures: delivery, Error: store.Clip(herr.Error())}
		r.diverted = true
	}
}

// flushScan commits what the scan delivered to this run (and a failure,
// if one took it out of the scan).
func (r *run) flushScan() error {
	c := r.scanNext
	if r.scanFail != nil {
		c = *r.scanFail
	}
	if c == r.cur {
		return nil
	}
	if err := r.commit(r.ctx, c, r.scanAcked, r.scanDead); err != nil {
		return err
	}
	r.scanAcked, r.scanDead = 0, 0
	return nil
}

// finishAll commits the run's part of the scan, lets a run that left the
// scan (or any run on a replicated stream) go on alone, and ends it.
func (r *run) finishAll(ctx context.Context, scanErr error) (Result, error) {
	err := r.scanErr
	if err == nil {
		err = r.flushScan()
	}
	if err == nil && scanErr != nil {
		err = scanErr
	}
	if err == nil && r.ctx.Err() == nil && (r.diverted || r.d.cfg.Replicas > 1) {
		r.deferPurge = false // it purges its own commits from here on
		if r.scanFail != nil {
			err = store.Sleep(r.ctx, r.d.backoff(r.scanFail.Failures))
		}
		if err == nil {
			err = r.loop(r.ctx)
		}
	}
	if err == nil && r.ctx.Err() != nil {
		err = context.Cause(r.ctx)
	}
	return r.end(ctx, err)
}

// sweep removes what the drained ids committed with one purge of all
// mailboxes below the first message that is not committed: a message of an
// id that was not drained, or the first message of a drained id past its
// stored cursor. Every message it removes is covered by a stored cursor,
// as with a per-id purge (design.md 3.4); new messages get higher
// sequences than any the scan saw. Ids whose cursor lies beyond the sweep
// are purged one by one.
func (d *Drainer) sweep(ctx context.Context, runs []*run, g sweep) {
	if d.serverPurges() {
		return
	}
	below := g.last + 1
	if g.blocked != 0 {
		below = min(below, g.blocked)
	}
	for _, r := range runs {
		for _, s := range r.scanned {
			if s > r.cur.Seq {
				below = min(below, s)
				break
			}
		}
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if below > 1 {
		if err := d.purge(pctx, wire.MailboxFilter(d.world), below); err != nil {
			d.log.Warn("drain: sweep of committed messages failed; the next drains purge them", "world", d.world, "below", below, "error", err)
			below = 1
		}
	}
	var rest []*run
	for _, r := range runs {
		if r.deferPurge && r.cur.Seq >= below {
			rest = append(rest, r)
		}
	}
	store.Parallel(DefaultParallel, len(rest), func(i int) {
		r := rest[i]
		if err := d.purge(pctx, r.subj, r.cur.Seq+1); err != nil {
			d.log.Warn("drain: purge of committed messages failed; the next commit retries", "world", d.world, "id", r.a.id, "error", err)
		}
	})
}
