package drain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/fencing"
	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/store"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/ownership"
)

// Holding is the right of one process to drain one id it holds through its
// node lease session (ownership.Session): a worker makes one per id it
// claims (Hold) and drains through it, one drain at a time. A Holding's
// drain pays one leader read of the record (is it still at the holding's
// revision?), the reads of the messages and the fenced commits (and the
// purge). It takes no drain lock, reads no node lease and, after its first
// drain, no cursor (docs/design.md 3.9):
//
//   - exclusive without a lock: the session is one process's (its node
//     lease epoch never repeats), the process runs one drain per Holding
//     at a time, and every other way to drain refuses an id held through a
//     session (*ContendedError with Session set);
//   - authority: at the start, the record still at the holding's revision
//     (else Authorize decides, and a seized holding gets nothing); before
//     each handler call, the session's local deadline (Lease.Valid) and the
//     caller's context (which a worker cancels when the watch shows a
//     newer epoch); every commit fenced on the record's revision;
//   - the cursor it committed last is the stored one: nobody else writes
//     it while the holding lasts. After a commit whose outcome is unknown
//     the next drain reads it again.
type Holding struct {
	d     *Drainer
	lease *ownership.Lease
	// subj, cursorSubj: the id's mailbox subject and its cursor's subject
	// in the bucket stream, made once.
	subj, cursorSubj string

	mu    sync.Mutex    // one drain at a time
	fence fencing.Fence // the lease's, refreshed if a drain re-read the record
	cur   wire.Cursor
	known bool // cur is the stored cursor
	live  bool // caught up: Deliver may hand out messages read elsewhere
	touch bool // a commit's outcome is unknown: the next run rewrites the record first
	purge purgeLater
	// owed: what Deliver handed out and has not committed yet (commits
	// are coalesced: see Deliver); since: when it began owing.
	owed  *lastCommit
	since time.Time
	last  time.Time // when it last added to owed
	// sent: a commit sent without waiting for its answer; the next one
	// goes out only after it was settled.
	sent *sentCommit
	// book: the id's state, for a holding from HoldState (state.go).
	book *stateBook
	// fault (tests only) sends each commit in place of send.
	fault func(send func() (jetstream.PubAckFuture, error)) (jetstream.PubAckFuture, error)
	// handed: the last message handed out by the holding. One at or below
	// it handed out again (after a commit of unknown outcome, say) is
	// labelled maybe seen (Message.Redelivered).
	handed uint64
	// answers: the answers to calls its runs handled, sent once a
	// stored cursor covers them (call.go): at a commit's acceptance
	// (settle, run.commit), or when a cursor read after a commit of
	// unknown outcome shows it was stored (begin).
	answers answers
}

// sentCommit is a commit in flight.
type sentCommit struct {
	ack   jetstream.PubAckFuture
	last  lastCommit
	fence fencing.Fence
	// writes: the state writes sent in the same batch (state.go).
	writes []store.StateWrite
	// the answer, once answered took it
	done bool
	pa   *jetstream.PubAck
	err  error
}

// answered says whether the answer came, without waiting.
func (p *sentCommit) answered() bool {
	if !p.done {
		select {
		case p.pa = <-p.ack.Ok():
			p.done = true
		case p.err = <-p.ack.Err():
			p.done = true
		default:
		}
	}
	return p.done
}

// wait waits for the answer, at most d, and not once the connection is
// closed (its answer will not come: an unknown outcome).
func (p *sentCommit) wait(d time.Duration, nc *nats.Conn) {
	if p.answered() {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !p.done {
		select {
		case p.pa = <-p.ack.Ok():
		case p.err = <-p.ack.Err():
		case <-t.C:
			p.err = context.DeadlineExceeded
		case <-tick.C:
			if !nc.IsClosed() {
				continue
			}
			p.err = nats.ErrConnectionClosed
		}
		p.done = true
	}
}

// Hold returns the Holding of a lease won through a session. A lease of
// its own (Store.Claim, Seize) is drained with DrainLease instead.
func (d *Drainer) Hold(l *ownership.Lease) (*Holding, error) {
	if !l.Backed() {
		return nil, fmt.Errorf("%w: Hold takes a lease won through a session (ownership.Session); drain %q with DrainLease", ErrInvalidOption, l.ID)
	}
	return &Holding{d: d, lease: l, fence: l.Fence,
		subj:       wire.MailboxSubject(d.world, l.ID),
		cursorSubj: wire.KeySubject(d.world, wire.CursorKey(l.ID)),
	}, nil
}

// Lease is the holding's lease.
func (h *Holding) Lease() *ownership.Lease { return h.lease }

// Drain delivers the id's mailbox to hd until it is empty (or WithMax),
// with DrainLease's outcomes: *ownership.FencedError, *HeldError or
// *FreeError once the holding is lost (after the last commit the broker
// accepted), *UnknownError when a commit's outcome is unknown.
//
// A drain that ends with the mailbox empty makes the holding live: from
// then on Deliver may hand out the id's later messages read elsewhere.
// Any other drain, one that failed included, leaves it not live.
func (h *Holding) Drain(ctx context.Context, hd Handler, opts ...RunOption) (Result, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	// Not caught up until this drain reads to the end: the caller drains
	// because its own read may have missed messages (and drops what it
	// read), so a drain that fails before it got there, in its record
	// check say, must not leave the holding live for the caller's next
	// batch to be handed out over them.
	h.live = false
	if err := h.settle(ctx); err != nil {
		return Result{}, err
	}
	r, err := h.begin(ctx, hd, opts)
	if err != nil {
		return Result{}, err
	}
	err = r.loop(r.ctx)
	return h.end(ctx, r, err, err == nil && !r.limited())
}

// Deliver hands hd msgs, messages of the holding's id that the caller read
// elsewhere (a worker reads every mailbox with one consumer), in stream
// order: every message of the id stored after the previous read of the
// holding (a Drain, or the Deliver before) and up to the last of msgs, with
// none missing. Messages the cursor covers are skipped. Each is handed out
// and committed as a Drain would (the same checks before each call, the
// same failure counts and dead letters), without reading the mailbox.
//
// ok is false, and nothing was done, when the holding is not live: no
// Drain ended with the mailbox empty since the holding began or since a
// Deliver failed, so the caller drains instead (which reads from the
// cursor and covers msgs). After a failed delivery (to be retried after
// its backoff) or an error, the holding is no longer live.
func (h *Holding) Deliver(ctx context.Context, msgs []*jetstream.RawStreamMsg, hd Handler) (res Result, ok bool, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.live {
		return Result{}, false, nil
	}
	msgs, whole := following(msgs, h.position())
	if !whole {
		// A message of the id was stored between what the holding has
		// and msgs, and is not in msgs: drain from the cursor instead.
		h.live = false
		return Result{}, false, nil
	}
	if len(msgs) == 0 {
		return Result{}, true, nil
	}
	r, err := h.begin(ctx, hd, nil)
	if err != nil {
		h.live = false
		return Result{}, true, err
	}
	res, err = h.handOut(ctx, r, msgs)
	return res, true, err
}

// handOut hands msgs (every message of the id after r's cursor up to the
// last of them, in stream order) to the handler in r, as Deliver does, and
// ends the run.
func (h *Holding) handOut(ctx context.Context, r *run, msgs []*jetstream.RawStreamMsg) (Result, error) {
	r.owedTo = h
	again, err := r.handle(r.ctx, msgs)
	if err == nil && r.last != nil {
		err = h.owe(r, *r.last)
	}
	return h.end(ctx, r, err, err == nil && !again)
}

// owe adds a commit that r's handle left uncommitted to what the holding
// owes; its messages count in r's result. Group commit: what is owed goes
// out as soon as no commit of the id is in flight; while one is,
// deliveries add to the next. The same for a commit that falls due within
// a run's messages (WithCommitEvery).
func (h *Holding) owe(r *run, l lastCommit) error {
	now := time.Now()
	if h.owed == nil {
		h.owed, h.since = &lastCommit{}, now
	}
	h.last = now
	h.owed.next = l.next
	h.owed.acked += l.acked
	h.owed.dead += l.dead
	r.res.Cursor = l.next.Seq
	r.res.Acked += l.acked
	r.res.DeadLettered += l.dead
	r.res.Count += l.acked + l.dead
	if h.sent == nil || h.sent.answered() || h.commitDue() {
		return h.sendOwed(r.ctx)
	}
	return nil
}

// following is msgs without what the holding has (sequences up to pos)
// and without repeats, in stream order; whole says whether it holds every
// message of the id stored after pos up to its last. A message that says
// which message of its subject was stored before it (wire.HeaderLastSeq: a
// post republished to a partitioned world's workers, docs/design/partitions.md) proves that
// nothing was missed before it when that one is pos or earlier, or the
// message before it in msgs; a message that does not say (the one
// consumer of every post, which never skips one) is taken as it comes.
func following(msgs []*jetstream.RawStreamMsg, pos uint64) (out []*jetstream.RawStreamMsg, whole bool) {
	for len(msgs) > 0 && msgs[0].Sequence <= pos {
		msgs = msgs[1:]
	}
	seen := pos
	for i, m := range msgs {
		if m.Sequence <= seen {
			if out == nil {
				out = append(make([]*jetstream.RawStreamMsg, 0, len(msgs)), msgs[:i]...)
			}
			continue
		}
		if prev := jsapi.LastValue(m.Header, wire.HeaderLastSeq); prev != "" {
			if p, err := strconv.ParseUint(prev, 10, 64); err != nil || p > seen {
				return nil, false
			}
		}
		if out != nil {
			out = append(out, m)
		}
		seen = m.Sequence
	}
	if out == nil {
		return msgs, true
	}
	return out, true
}

// Start is the first delivery of a holding whose caller read messages of
// the id itself while nobody held it here, and saw every later one (msgs,
// in stream order, then the caller's later Delivers). The holding reads
// its cursor and, when msgs hold every message of the id after it,
// delivers them without reading the mailbox; it is live from then on (see
// Deliver). Otherwise it drains from the cursor, as Drain does.
//
// msgs prove that themselves when they name their predecessors (the posts
// a partitioned world republishes, docs/design/partitions.md): the first one
// after the cursor names one at or before it, each later one the message
// before it (following). Messages that do not name theirs are taken as
// every message of the id stored so far (a worker whose one consumer read
// every mailbox from the stream's first message on, docs/design/pipeline.md point 6); a
// caller that cannot vouch for them drains instead.
func (h *Holding) Start(ctx context.Context, msgs []*jetstream.RawStreamMsg, hd Handler) (Result, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.live = false
	if err := h.settle(ctx); err != nil {
		return Result{}, err
	}
	r, err := h.begin(ctx, hd, nil)
	if err != nil {
		return Result{}, err
	}
	if rest, whole := following(msgs, r.cur.Seq); whole {
		return h.handOut(ctx, r, rest)
	}
	// A message of the id lies between the cursor and msgs, or within
	// them, that the caller did not see.
	err = r.loop(r.ctx)
	return h.end(ctx, r, err, err == nil && !r.limited())
}

// position is the last message the holding handed out and did not fail:
// its stored cursor, or the one it owes.
func (h *Holding) position() uint64 { return h.ahead().Seq }

// ahead is the furthest cursor the holding has: the one it owes, else the
// one in flight, else the stored one. A run starts from it, so that any
// cursor the run writes (a failure count, a commit within a batch) is at
// or after every cursor already sent: the cursor never goes back, whatever
// order the answers come in.
func (h *Holding) ahead() wire.Cursor {
	switch {
	case h.owed != nil:
		return h.owed.next
	case h.sent != nil:
		return h.sent.last.next
	}
	return h.cur
}

// commitDue says whether what the holding owes is to be committed now: as
// a drain commits within a batch (WithCommitEvery), every commitEvery
// messages or commitInterval. The caller commits the rest after
// commitInterval at the latest (FlushBy, Flush).
func (h *Holding) commitDue() bool {
	if h.owed == nil {
		return false
	}
	if h.book != nil && h.sent != nil {
		// A state holding's batch is in flight: what it owes goes out
		// when it is answered (or at the interval). Each batch costs the
		// server a synced write of its own on a single file-backed
		// replica (about 6.5 ms here, design 3.12), and a redelivery
		// applies no effect twice: the group grows instead of waiting.
		return time.Since(h.since) >= h.d.commitInterval
	}
	return h.owed.acked+h.owed.dead >= h.d.commitEvery || time.Since(h.since) >= h.d.commitInterval
}

// commitLinger is how long a holding waits for more deliveries before it
// commits what it owes: a burst of an id's messages is committed once,
// and an id that went quiet is committed at once, so that a crash
// delivers again little more than what was in flight.
const commitLinger = 20 * time.Millisecond

// FlushBy says by when the holding is to be flushed (Flush) to commit
// what it owes: commitLinger after its last delivery, and within
// WithCommitEvery's interval at the latest; zero: it owes nothing. While
// answers to calls wait for a commit (owed, or sent and not yet settled),
// now: their callers wait for the commit's acceptance, not for the
// linger, nor for the next delivery to settle it.
func (h *Holding) FlushBy() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.answers.list) > 0 && (h.owed != nil || h.sent != nil) {
		return time.Now()
	}
	if h.owed == nil {
		return time.Time{}
	}
	by := h.since.Add(h.d.commitInterval)
	if linger := h.last.Add(commitLinger); linger.Before(by) {
		by = linger
	}
	return by
}

// sendOwed settles the commit in flight and sends what the holding owes,
// fenced, without waiting for the answer (settle takes it). The cursor's
// writes stay in order: one in flight at a time. Once the holding's local
// deadline passed nothing is sent (the record is to be read first, and
// the next holder gets those messages again): *ownership.FreeError.
func (h *Holding) sendOwed(ctx context.Context) error {
	if err := h.settle(ctx); err != nil {
		return err
	}
	o := h.owed
	if o == nil {
		return nil
	}
	if !h.lease.Valid() {
		return &ownership.FreeError{ID: h.lease.ID, LastEpoch: h.lease.Epoch}
	}
	if h.d.beforeCommit != nil {
		h.d.beforeCommit(h.lease.ID, o.next)
	}
	data, err := wire.EncodeCursor(o.next)
	if err != nil {
		return err
	}
	w := h.book.writes()
	var ack jetstream.PubAckFuture
	if h.fault != nil {
		f := h.fence
		ack, err = h.fault(func() (jetstream.PubAckFuture, error) {
			return h.d.publishCommitAsync(f, h.cursorSubj, data, w, h.book != nil && len(w) > 0)
		})
	} else {
		// A state commit without writes goes as a plain fenced write:
		// settled above, nothing of the id is queued, so it keeps its
		// place.
		ack, err = h.d.publishCommitAsync(h.fence, h.cursorSubj, data, w, h.book != nil && len(w) > 0)
	}
	if err != nil {
		return fmt.Errorf("drain: commit of %q not sent (nothing removed): %w", h.lease.ID, err)
	}
	h.owed, h.sent = nil, &sentCommit{ack: ack, last: *o, fence: h.fence, writes: w}
	return nil
}

// Flush commits what the holding owes and waits for every commit in
// flight; it returns their outcome (as Drain's). A worker flushes a
// holding within the commit interval, and before it releases the id.
func (h *Holding) Flush(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.sendOwed(ctx); err != nil {
		return err
	}
	return h.settle(ctx)
}

// settle takes the answer to the commit in flight. A refusal is decided
// as a drain's commit decides it: the record read again, the commit
// written again if the holding is unchanged, else the ownership outcome
// (the messages it covered are delivered again to the new holder). No
// answer within holdingCommitWait is an unknown outcome: the cursor is read
// again before the next delivery.
func (h *Holding) settle(ctx context.Context) error {
	p := h.sent
	if p == nil {
		return nil
	}
	h.sent = nil
	d := h.d
	p.wait(holdingCommitWait, d.nc)
	err := p.err
	if a := p.pa; err == nil {
		if d.onCommit != nil {
			f := p.fence
			d.onCommit(Commit{ID: f.ID, Node: f.Node, Epoch: f.Epoch, Revision: f.Revision, Cursor: p.last.next.Seq, StreamSeq: a.Sequence})
		}
		// A cursor a run wrote itself while this one was in flight (a
		// commit within a batch) is later: keep it.
		if p.last.next.Seq > h.cur.Seq {
			h.cur = p.last.next
		}
		h.book.confirm(p.writes, p.last.next.Seq)
		h.answers.release(d, p.last.next.Seq)
		h.known = true
		if !d.serverPurges() {
			h.purge.request(d, h.subj, p.last.next.Seq+1)
		}
		return nil
	}
	h.live = false
	if !store.WrongLastSequence(err) {
		// Read the cursor again (what it covers is not known), after
		// fencing out the commit if it is still on its way.
		h.known, h.owed, h.touch = false, nil, true
		h.book.forget()
		return &UnknownError{ID: h.lease.ID, Cursor: p.last.next.Seq, Err: err}
	}
	// Refused by the fence: commit again as a drain would, which reads the
	// record and gives the ownership outcome if the holding was lost.
	r, err := h.begin(ctx, nil, nil)
	if err != nil {
		if errors.Is(err, ownership.ErrFenced) || errors.Is(err, ownership.ErrHeld) || errors.Is(err, ownership.ErrFree) {
			d.metrics.FencedCommit(d.world)
		}
		return err
	}
	target := p.last.next
	if h.book != nil && h.owed != nil && h.owed.next.Seq > target.Seq {
		// A state holding commits what it owes instead: its view is at
		// the owed cursor, and a commit of the run that is delivering
		// (settle is called from its sendOwed) may have been stored after
		// this one was sent, and not be in h.cur yet; the old batch sent
		// again would put its keys back behind it (design 3.12 point 6).
		// Every dirty key goes with the owed cursor.
		target = h.owed.next
	} else if h.book != nil {
		r.resend = p.writes // with the state this cursor was sent with
	}
	if r.stored.Seq >= target.Seq {
		// A later cursor was stored meanwhile (a commit within a batch):
		// writing this one again would move the cursor back.
		_, err = h.end(ctx, r, nil, false)
		return err
	}
	err = r.commit(r.ctx, target, 0, 0)
	_, err = h.end(ctx, r, err, false)
	return err
}

// Clean says whether a release would hand the next holder nothing this
// holding may have handed out uncommitted: every message it handed out is
// covered by the stored cursor, or is the one the cursor counts failures
// for (its next delivery says so). Call it after Flush. A worker releases
// only a clean holding's id; any other goes with its lease (a lapse, the
// node lease), and the next holder labels what it finds (PriorUntil).
func (h *Holding) Clean() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.known && h.owed == nil && h.sent == nil &&
		(h.handed <= h.cur.Seq || (h.cur.Failures > 0 && h.handed <= h.cur.Head))
}

// Covers says whether the holding has handed out every message of its id
// up to seq (and failed none): its cursor, stored, in flight or owed, is
// known and at seq or after it. Messages are handed out in stream order
// without a gap, so a caller whose copy of the id's messages missed some,
// none after seq, may still Deliver what it has after them (a worker whose
// inbox overflowed while a drain read the mailbox).
func (h *Holding) Covers(seq uint64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.known && h.position() >= seq
}

// Live says whether Deliver may be used (see Deliver).
func (h *Holding) Live() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.live
}

// begin starts a run of the holding: the record check (invariant 4) and
// the cursor.
func (h *Holding) begin(ctx context.Context, hd Handler, opts []RunOption) (*run, error) {
	d, l := h.d, h.lease
	if !l.Valid() {
		return nil, &ownership.FreeError{ID: l.ID, LastEpoch: l.Epoch}
	}
	var o runOptions
	if len(opts) > 0 { // o stays on the stack for a delivery (no options)
		p := new(runOptions)
		for _, opt := range opts {
			opt(p)
		}
		o = *p
	}
	a := &authority{id: l.ID, node: l.Node, epoch: l.Epoch, ttl: l.TTL, fence: h.fence, backed: true, lease: l, priorUntil: l.PriorUntil}
	// Invariant 4: nothing to a holding that is no longer on the record.
	// One read proves it unchanged (batched with other holdings' checks);
	// a changed record is decided in full (a seize: refused before
	// anything is delivered).
	if h.touch {
		// A commit's outcome is unknown: it may still be on its way (in
		// a proxy's buffer, or resent by the client after a "no
		// responders"). Rewrite the record first (Touch, as a drain that
		// took over a lapsed lock does, 3.5): from then on that commit is
		// refused, so the cursor read below is the last word and no late
		// commit can move it back behind this run's.
		if err := a.take(d.own.Touch(ctx, l.ID, l.Node, l.Epoch)); err != nil {
			return nil, err
		}
		h.fence, h.touch = a.fence, false
	} else if same, err := d.own.Unchanged(ctx, l.ID, h.fence.Revision); err != nil {
		return nil, err
	} else if !same {
		if err := d.authorize(ctx, a); err != nil {
			return nil, err
		}
		h.fence = a.fence
	}
	now := time.Now()
	r := &run{d: d, a: a, h: hd, o: o, committed: now, started: now, commitWait: holdingCommitWait,
		subj: h.subj, cursorSubj: h.cursorSubj, bg: &h.purge, seenTo: h.handed,
	}
	r.st = h.book
	r.answers = &h.answers
	r.ctx, r.stop = context.WithCancelCause(ctx)
	if h.known && (h.book == nil || h.book.known) {
		r.cur, r.res.Cursor = h.cur, h.cur.Seq
	} else if err := r.loadCursor(r.ctx); err != nil {
		r.stop(nil)
		return nil, err
	}
	r.stored = r.cur
	// Calls the stored cursor covers are committed: a commit of unknown
	// outcome that was stored after all answers them here.
	h.answers.release(d, r.stored.Seq)
	if a := h.ahead(); a.Seq > r.cur.Seq {
		// The run goes on from what the holding owes or sent: its first
		// commit covers that too.
		r.cur, r.res.Cursor = a, a.Seq
	}
	return r, nil
}

// end finishes a run of the holding; caughtUp: the run read the mailbox to
// its end and delivered all of it.
func (h *Holding) end(ctx context.Context, r *run, err error, caughtUp bool) (Result, error) {
	d, l := h.d, h.lease
	defer d.observe(r.started, &r.res)
	res, err := r.end(ctx, err)
	h.handed = max(h.handed, r.handed)
	// A fence the run refreshed (a refused commit that re-read the record
	// and found the holding unchanged) carries on to the next one.
	h.fence = r.a.fence
	// At the same sequence too: a failure count the run committed (a
	// failed delivery writes the cursor again at the same sequence, with
	// the count) is the stored cursor from now on. Kept at the old one,
	// the next run of the holding counted that delivery again from 1
	// (max_deliveries+1 calls, delivery 1 twice). The
	// holding's cursors never go back (ahead), so the run's last stored
	// one is as new as h.cur when at its sequence; a commit settled during
	// the run (settle) may be further on.
	if !h.known || r.stored.Seq >= h.cur.Seq {
		h.cur = r.stored
	}
	h.known = !r.uncertain
	h.touch = h.touch || r.uncertain
	if h.book != nil && (err != nil || r.uncertain) {
		// The view may hold writes of messages that are to be delivered
		// again: read the state and the cursor again, and owe nothing.
		h.book.forget()
		h.known = false
	}
	if h.owed != nil && (!h.known || h.cur.Seq >= h.owed.next.Seq) {
		h.owed = nil // committed by the run (or unknown: read again)
	}
	h.live = caughtUp && err == nil && h.known
	if h.known && h.cur.Seq > 0 && !d.serverPurges() {
		// What the cursor covers goes, also what an earlier holder
		// committed and did not purge (it crashed, say): a drain that
		// commits nothing purges too, as a drain on the lock path does.
		h.purge.request(d, r.subj, h.cur.Seq+1)
	}
	if d.log.Enabled(ctx, slog.LevelDebug) {
		d.log.Debug("drain", "world", d.world, "id", l.ID, "epoch", l.Epoch, "count", res.Count, "cursor", res.Cursor, "error", err, "holding", true)
	}
	return res, err
}
