package drain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/store"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/queue"
)

// maxCommitAttempts bounds the retries of one cursor write while renewals
// keep moving the ownership record under it.
const maxCommitAttempts = 32

// commitTimeout bounds one commit of a drain on the lock path (Drain,
// DrainLease: `fencepost drain`), retries included.
const commitTimeout = 10 * time.Second

// holdingCommitWait bounds the wait for the answer to a holding's commit
// (a worker's), retries included. No answer by then is an unknown
// outcome: the holding fences the commit out (Touch) and reads its cursor
// again before its next delivery, as after any unknown commit. A commit
// sent to a bucket leader that had just died is never answered, and
// waiting commitTimeout for it held the id's delivery for 10 s (bench
// --cluster 3 --kill-leaders); the shards' holders wait 1 s.
const holdingCommitWait = 2 * time.Second

// run is one drain of one id.
type run struct {
	d  *Drainer
	a  *authority
	lk *heldLock
	h  Handler
	o  runOptions

	subj        string      // the mailbox subject
	cursorSubj  string      // the cursor's subject in the bucket stream
	cur         wire.Cursor // the last committed cursor (a holding's: or the one it owes, see Holding)
	stored      wire.Cursor // the last cursor this run knows stored
	purgedBelow uint64      // messages below this sequence were purged
	purging     chan purgeResult
	bg          *purgeLater // a holding's purges, after its drains
	started     time.Time
	res         Result
	uncertain   bool      // a commit's outcome is unknown
	committed   time.Time // when the last commit was stored (or the run began)
	// commitWait bounds each commit: commitTimeout on the lock path,
	// holdingCommitWait in a holding.
	commitWait time.Duration
	// seenTo: messages up to this sequence may have been handed out
	// before by this holding (Holding.handed); handed: the last one this
	// run handed out. interrupted: a handler was stopped mid-call, its
	// message neither acknowledged nor counted as failed.
	seenTo, handed uint64
	interrupted    bool

	ctx  context.Context // the drain's: ends when the lock is lost
	stop context.CancelCauseFunc

	// owedTo: the holding whose Deliver (or Start) hands out the run's
	// messages (handOut). handle then writes none of its commits: it
	// passes each to the holding (Holding.owe), whose group commit sends
	// it without waiting, and leaves the one at the end of its messages
	// in last, which handOut passes on.
	owedTo *Holding
	last   *lastCommit

	// st: the id's state, for a run with state (state.go); resend: the
	// writes of a commit sent again (Holding.settle), instead of st's.
	st     *stateBook
	resend []store.StateWrite

	// answers: the answers to calls the run handled, sent once a commit
	// covers them (call.go); a holding's run shares the holding's.
	answers *answers
}

// lastCommit is a commit that handle left to its caller.
type lastCommit struct {
	next        wire.Cursor
	acked, dead int
}

func (d *Drainer) drain(ctx context.Context, a *authority, h Handler, opts []RunOption) (Result, error) {
	debug := d.log.Enabled(ctx, slog.LevelDebug)
	r, err := d.begin(ctx, a, h, opts, true)
	if err != nil {
		if debug {
			d.log.Debug("drain refused", "world", d.world, "id", a.id, "epoch", a.epoch, "error", err)
		}
		return Result{}, err
	}
	err = r.loop(r.ctx)
	res, err := r.end(ctx, err)
	if debug {
		d.log.Debug("drain", "world", d.world, "id", a.id, "epoch", a.epoch, "count", res.Count, "cursor", res.Cursor, "error", err)
	}
	return res, err
}

// begin starts a drain of one id: the holder check, the lock (kept by
// an ownership.Term, which end stops) and, with cursor, the cursor (which
// must be read after the lock was taken).
func (d *Drainer) begin(ctx context.Context, a *authority, h Handler, opts []RunOption, cursor bool) (*run, error) {
	var o runOptions
	for _, opt := range opts {
		opt(&o)
	}
	// The holder check comes first: a caller that does not hold the id
	// writes nothing at all, not even the lock.
	if err := d.authorize(ctx, a); err != nil {
		return nil, err
	}
	if o.state && !d.w.AllowsState() {
		return nil, fmt.Errorf("drain: world %q: %w", d.world, ErrNoState)
	}
	if a.backed {
		// Held through a session: its worker drains it with a Holding,
		// without a lock; a second drain here would run beside it.
		return nil, &ContendedError{ID: a.id, Node: a.node, Epoch: a.epoch, Session: true}
	}
	lk, takeover, err := d.acquire(ctx, a)
	if err != nil {
		return nil, err
	}
	r := &run{d: d, a: a, lk: lk, h: h, o: o, committed: time.Now(), commitWait: commitTimeout,
		subj:       wire.MailboxSubject(d.world, a.id),
		cursorSubj: wire.KeySubject(d.world, wire.CursorKey(a.id)),
	}
	if o.state {
		r.st = &stateBook{}
	}
	r.ctx, r.stop = context.WithCancelCause(ctx)
	lk.keep(r.stop)
	if takeover {
		// The drain before this one stopped without releasing its lock
		// (a crash, a commit of unknown outcome, a handler interrupted):
		// what it read, stored before now, may have been handed out.
		a.seenBefore(time.Now().Add(d.skew))
		err = r.fenceTakeover(r.ctx)
	}
	if err == nil && cursor {
		err = r.loadCursor(r.ctx)
	}
	if err != nil {
		_, err = r.end(ctx, err)
		return nil, err
	}
	return r, nil
}

// end finishes a drain: the last purge, the lock's Term, the lock. It turns a
// cancellation caused by a lost lock into that cause.
func (r *run) end(ctx context.Context, err error) (Result, error) {
	r.finishPurge(r.ctx)
	r.stop(nil)
	r.lk.close()
	// After an unknown commit the lock is left to lapse: the next drain
	// then takes it over, which fences a commit still in flight. After an
	// interrupted handler it is left lapsed at once: the next drain takes
	// it over without waiting and labels what it hands out (maybeSeen).
	if !r.uncertain && r.lk != nil { // a holding's run has no lock (release is a no-op): no timer per delivery
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		r.lk.release(cctx, r.interrupted)
		cancel()
	}
	if cause := context.Cause(r.ctx); err != nil && cause != nil && !errors.Is(cause, context.Canceled) && ctx.Err() == nil {
		err = cause // the lock was lost
	}
	return r.res, err
}

// fenceTakeover runs after this drain took over a lapsed lock: it moves
// the ownership record's revision past any fence the previous drain may
// still hold (ownership.Store.Touch: the record written again unchanged,
// by compare-and-swap; holders and keepers see a renewal by no one). If
// the swap loses, the record moved anyway. Either way every commit the
// previous drain sends from now on is refused, and its retry finds out it
// lost the lock (design.md 3.5). The fence is then read fresh.
func (r *run) fenceTakeover(ctx context.Context) error {
	return r.a.take(r.d.own.Touch(ctx, r.a.id, r.a.node, r.a.epoch))
}

// loadCursor reads the id's cursor through the bucket stream's leader, and
// then, for a run with state, the state stored with it.
func (r *run) loadCursor(ctx context.Context) error {
	c, at, err := r.d.readCursor(ctx, r.a.id)
	if err != nil {
		return err
	}
	if r.st != nil {
		st, err := store.LoadState(ctx, r.d.w, r.a.id, at)
		if err != nil {
			return err
		}
		r.st.set(st, c.Seq)
	}
	r.cur, r.res.Cursor = c, c.Seq
	return nil
}

// loop reads and handles batches until the mailbox is empty or the limit
// is reached. While the handler works through a full batch, the next one
// is already being read (from after the batch's last message); it is used
// only if the cursor ends up exactly there.
func (r *run) loop(ctx context.Context) error {
	var (
		ahead *readAhead
		f     *follower
	)
	defer func() { ahead.discard(); f.close() }()
	for {
		n := r.batchSize(r.res.Count)
		if n == 0 {
			return nil
		}
		var (
			b   batchResult
			err error
		)
		switch {
		case f != nil:
			if b, err = f.read(ctx, r.cur.Seq+1, n); errors.Is(err, errFollowerMoved) {
				f.close()
				f = nil
				continue
			}
		case ahead.matches(r.cur.Seq+1, n):
			b, err = ahead.wait()
		default:
			ahead.discard()
			b, err = readBatch(ctx, r.d.nc, wire.MailboxStream(r.d.world), r.subj, r.cur.Seq+1, n)
		}
		ahead = nil
		if err != nil {
			return err
		}
		if len(b.msgs) == 0 {
			if more, err := r.leaderHasMore(ctx); err != nil || !more {
				return err
			}
			// The replica that answered lags the leader: read again.
			f.close()
			f = nil
			if err := store.Sleep(ctx, 2*time.Millisecond); err != nil {
				return err
			}
			continue
		}
		if f == nil && len(b.msgs) == n {
			next := r.batchSize(r.res.Count + n)
			switch {
			case next > 0 && b.pending >= followThreshold:
				// A deep mailbox: follow it with a consumer from here on.
				if f, err = r.follow(ctx, b.msgs[n-1].Sequence+1); err != nil {
					return err
				}
			case next > 0:
				ahead = r.readAhead(ctx, b.msgs[n-1].Sequence+1, next)
			}
		}
		again, err := r.handle(ctx, b.msgs)
		if err != nil {
			return err
		}
		if !again && len(b.msgs) < n && b.pending == 0 && r.d.cfg.Replicas == 1 {
			return nil // the only replica said this was all
		}
	}
}

// limited says whether the run stopped at WithMax.
func (r *run) limited() bool { return r.o.max > 0 && r.res.Count >= r.o.max }

// batchSize is how many messages the next read asks for once count left
// the mailbox: the batch, or what remains of WithMax.
func (r *run) batchSize(count int) int {
	if r.o.max > 0 {
		return max(min(r.d.batch, r.o.max-count), 0)
	}
	return r.d.batch
}

// readAhead is a batch read running in the background.
type readAhead struct {
	from uint64
	n    int
	ch   chan readResult
}

type readResult struct {
	b   batchResult
	err error
}

func (r *run) readAhead(ctx context.Context, from uint64, n int) *readAhead {
	a := &readAhead{from: from, n: n, ch: make(chan readResult, 1)}
	go func() {
		b, err := readBatch(ctx, r.d.nc, wire.MailboxStream(r.d.world), r.subj, from, n)
		a.ch <- readResult{b, err}
	}()
	return a
}

func (a *readAhead) matches(from uint64, n int) bool { return a != nil && a.from == from && a.n == n }

func (a *readAhead) wait() (batchResult, error) {
	res := <-a.ch
	return res.b, res.err
}

// discard waits for an unused read to end, so that no goroutine outlives
// the drain.
func (a *readAhead) discard() {
	if a != nil {
		<-a.ch
	}
}

// leaderHasMore asks the stream leader whether a message after the cursor
// exists. On a single replica the direct read already came from it.
func (r *run) leaderHasMore(ctx context.Context) (bool, error) {
	if r.d.cfg.Replicas == 1 {
		return false, nil
	}
	_, err := jsapi.LeaderGet(ctx, r.d.nc, wire.MailboxStream(r.d.world), jsapi.GetRequest{Seq: r.cur.Seq + 1, NextFor: r.subj})
	if errors.Is(err, jsapi.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// handle delivers one batch in order and commits it with one cursor write.
// A failed delivery commits the messages before it together with the
// failure count, waits, and returns again=true so that the loop reads from
// it again.
func (r *run) handle(ctx context.Context, msgs []*jetstream.RawStreamMsg) (again bool, err error) {
	next := r.cur
	var acked, dead int
	for _, m := range msgs {
		if m.Sequence <= next.Seq {
			continue // committed; its purge has not reached this replica
		}
		delivery := r.cur.FailuresOf(m.Sequence) + 1
		if delivery > r.d.cfg.MaxDeliveries {
			// Its deliveries ran out in an earlier drain that could not
			// dead-letter it: try that again, without another call.
			if err := r.deadLetter(ctx, m, delivery-1, r.cur.Error); err != nil {
				return false, r.keepAcked(ctx, next, acked, dead, err)
			}
			r.deadLettered(m, r.cur.Error)
			next, dead = wire.Cursor{Seq: m.Sequence}, dead+1
			continue
		}
		msg := r.message(m, delivery)
		// Hand out nothing once the drain was stopped (a self-fence
		// cancels it) or its authority ran out while it worked through
		// the batch: a holder paused or cut off mid-batch would otherwise
		// deliver the rest after a newer holder did (docs/contract.md section 5: every
		// route refuses work on a lapsed lease). What was acknowledged is
		// committed if the holding still allows. The check comes right
		// before the call, so that a pause between the two is as unlikely
		// as it can be made (it cannot be ruled out: see
		// docs/reliability.md, stale deliveries).
		if err := r.stillHolder(ctx); err != nil {
			if next.Seq > r.cur.Seq {
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				defer cancel()
				if cerr := r.commit(cctx, next, acked, dead); cerr != nil {
					return false, cerr
				}
			}
			return false, err
		}
		msg.Fence = r.a.fence // a new revision if the check read the record
		if r.st != nil {
			msg.State = r.st.message()
		}
		r.res.Deliveries++
		r.handed = max(r.handed, m.Sequence)
		herr := r.h(ctx, msg)
		if herr == nil {
			// A call's answer waits for the commit; one that cannot be
			// sent fails the delivery.
			herr = r.replied(msg)
		}
		if herr == nil {
			if msg.State != nil {
				r.st.ack(msg.State)
			}
			next, acked = wire.Cursor{Seq: m.Sequence}, acked+1
			if r.commitDue(acked + dead) {
				// A holding's Deliver owes it (its group commit sends it
				// without waiting): written and waited for here, a state
				// holding's commit is an atomic batch behind the others,
				// and the id's deliveries waited with it (22 ms per batch
				// of 226 in the counter bench; docs/design/pipeline.md point 3).
				if r.owedTo != nil {
					if err := r.owedTo.owe(r, lastCommit{next, acked, dead}); err != nil {
						return false, err
					}
					r.committed = time.Now()
				} else if err := r.commit(ctx, next, acked, dead); err != nil {
					return false, err
				}
				acked, dead = 0, 0
			}
			continue
		}
		if ctx.Err() != nil {
			// Stopped while the handler ran: not the message's fault. Keep
			// what was acknowledged, if the holding still allows. The
			// message was handed out: the next drain labels it (end).
			r.interrupted = true
			if next.Seq > r.cur.Seq {
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				defer cancel()
				if cerr := r.commit(cctx, next, acked, dead); cerr != nil {
					return false, cerr
				}
			}
			return false, context.Cause(ctx)
		}
		fail := wire.Cursor{Seq: next.Seq, Head: m.Sequence, Failures: delivery, Error: store.Clip(herr.Error())}
		if delivery >= r.d.cfg.MaxDeliveries {
			if err := r.deadLetter(ctx, m, delivery, herr.Error()); err != nil {
				// Keep the count, so that no drain calls the handler
				// with it again (the check above).
				return false, r.keepAcked(ctx, fail, acked, dead, err)
			}
			r.deadLettered(m, herr.Error())
			next, dead = wire.Cursor{Seq: m.Sequence}, dead+1
			continue
		}
		if err := r.commit(ctx, fail, acked, dead); err != nil {
			return false, err
		}
		return true, store.Sleep(ctx, r.d.backoff(delivery))
	}
	if next.Seq == r.cur.Seq {
		return false, nil
	}
	if r.owedTo != nil {
		r.last = &lastCommit{next, acked, dead}
		return false, nil
	}
	return false, r.commit(ctx, next, acked, dead)
}

// commitDue says whether what the handler acknowledged since the last
// commit (n messages) is to be committed now, within the batch.
func (r *run) commitDue(n int) bool {
	return n >= r.d.commitEvery || time.Since(r.committed) >= r.d.commitInterval
}

// keepAcked commits next if it moves the cursor (what the drain delivered
// before it stopped on err) and returns err, or the commit's error.
func (r *run) keepAcked(ctx context.Context, next wire.Cursor, acked, dead int, err error) error {
	if next != r.cur {
		if cerr := r.commit(ctx, next, acked, dead); cerr != nil {
			return cerr
		}
	}
	return err
}

// stillHolder says whether the drain may hand out another message: not
// stopped, and its authority still valid by the local clock, or valid
// again after reading the record (a keeper may have renewed the lease).
func (r *run) stillHolder(ctx context.Context) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if r.a.valid() {
		return nil
	}
	if err := r.reauthorize(ctx); err != nil {
		return err
	}
	if !r.a.valid() {
		return &ownership.FreeError{ID: r.a.id, LastEpoch: r.a.epoch}
	}
	return nil
}

func (r *run) message(m *jetstream.RawStreamMsg, delivery int) Message {
	msg := Message{
		ID: r.a.id, Seq: m.Sequence, From: r.sender(m),
		Body: m.Data, Headers: queue.UserHeaders(m.Header), Posted: m.Time,
		Delivery: delivery, Fence: r.a.fence,
		Redelivered: r.maybeSeen(m, delivery),
	}
	r.prepareCall(&msg, m)
	return msg
}

// maybeSeen is Message.Redelivered: m may have been handed to a handler
// before. It errs one way only (design.md 3.6, maybe seen before): a
// failed delivery is on the cursor, a message at or below seenTo was
// handed out earlier in this holding (a commit of unknown outcome, read
// again), and one stored before priorUntil may have been an earlier
// holder's or an earlier drain's (a takeover).
func (r *run) maybeSeen(m *jetstream.RawStreamMsg, delivery int) bool {
	return delivery > 1 || m.Sequence <= r.seenTo ||
		(!r.a.priorUntil.IsZero() && !m.Time.After(r.a.priorUntil))
}

// sender is the message's sender, if it keeps the sender rule; one that
// breaks it (a producer in another language is not checked on the way in)
// is logged and not handed on.
func (r *run) sender(m *jetstream.RawStreamMsg) string {
	from, ok := queue.Sender(m.Header)
	if !ok {
		r.d.log.Warn("drain: message with an invalid sender; delivered without it",
			"world", r.d.world, "id", r.a.id, "seq", m.Sequence, "from", store.Clip(queue.HeaderValue(m.Header, queue.HeaderFrom)))
	}
	return from
}

func (d *Drainer) backoff(delivery int) time.Duration {
	b := d.backoffMin
	for i := 1; i < delivery && b < d.backoffMax; i++ {
		b *= 2
	}
	return min(b, d.backoffMax)
}
