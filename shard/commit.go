package shard

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fencepost/fencepost/fencing"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/store"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/world"
)

// The shard's commits and its removal of committed mail.
//
// Who removes what, and why it is safe (the one removal path of a sharded
// world; in a world of purge=server, fencepostd's purger in the holder's
// place, by the same rule): the holder of a shard, after the broker
// accepted a cursor c of the shard under the holder's fence, purges the
// shard's stored mail below c.Low() with one request. Every message below
// c.Low() is covered by c (wire.ShardCursor.Low), and c was stored while
// the shard's record was at the holder's revision, so no later holder
// starts below it: the next holder reads the last stored cursor, which is
// c or a later one of a holder that read c (a cursor is only ever written
// by the shard's current holder, and each holder starts from the one it
// read). A stale holder (paused, then taken over) purges below a cursor it
// did commit, which covers only what it handled: a message is never
// removed unhandled. Dead letters are another subject (fp.<w>.dl.<eid>)
// and never purged here.

// commitDue starts a commit of the book's cursor when it moved and no
// commit is in flight, and removes what the last accepted commit covers
// when removal is due. The commit's answer comes to serve's loop
// (commitEnded), which goes on reading and handing out meanwhile: a commit
// that waits on a bucket stream whose leader died (up to commitTimeout)
// holds back no delivery, only the removal and the answers of calls.
func (h *holder) commitDue() {
	h.removeDue(false)
	if h.committing {
		return
	}
	c, writes := h.stateFor(h.b.cursor())
	if c.Seq == h.committed.Seq && maps.Equal(c.Pending, h.committed.Pending) {
		return
	}
	h.committing = true
	fence, shared := h.fence, h.refused == 0
	go func() {
		err := h.write(c, writes, fence, shared)
		select {
		case h.commits <- commitEnd{c: c, err: err}:
		case <-h.ended:
		}
	}()
}

// commitEnd is a commit's end: the cursor it wrote, and the broker's
// answer.
type commitEnd struct {
	c   wire.ShardCursor
	err error
}

// commitEnded takes a commit's end: an accepted cursor is the holding's
// new committed point, a refusal by the fence ends the holding (errLost),
// and another error leaves the cursor to the next tick.
func (h *holder) commitEnded(e commitEnd) error {
	h.committing = false
	switch {
	case e.err == nil:
		h.refused = 0
		h.committed = e.c
		h.stateCommitted(e.c)
		h.answerCommitted(e.c)
		h.wk.commits.Add(1)
		h.removeDue(false)
		return nil
	case store.WrongLastSequence(e.err):
		if h.once == nil {
			return h.refence(e.err)
		}
		if h.once.refence(h) {
			return nil // the holder renewed: commit again at the next tick
		}
		h.log.Warn("commit refused: the shard was taken over", "event", "fenced", "error", e.err)
		return errLost
	default:
		h.log.Warn("commit failed; trying again", "error", e.err)
		return nil
	}
}

// maxRefused bounds the commits of a worker's holding refused in a row
// over a record that still named it, or could not be read (refence).
const maxRefused = 8

// refence takes the broker's refusal of a worker's holding's commit. A
// refusal does not always mean that the record moved: a replicated
// stream's leader refuses an expected check on a subject while another
// write with an expectation on it is in process (10164, "wrong last
// sequence" with no number; nats-server v2.15.3 jetstream_batching.go),
// and a record can be rewritten as it was. So the record is read through
// the leader:
//
//   - another node's or epoch's, or free: the shard was taken over (or
//     lapsed), and the holding ends (errLost);
//   - still this node's at the holding's epoch: the commits go on at its
//     revision now. No other holding of the shard ever has this epoch
//     (invariant 2), and each commit is still accepted only while the
//     record is unchanged from the one just read (invariant 5). The per-id
//     drain does the same (drain/commit.go, reauthorize);
//   - not read: the next tick commits again, and refuses or reads again.
//
// After maxRefused refusals in a row the holding fails (not lost), and
// its shard is released if the record still names this node, to be
// claimed afresh: a lost holding's shard is left alone, and one whose
// record was still this node's would be held by a live node and served by
// nobody (before this, every refusal ended the holding as lost:
// TestShards_CommitRefusedOverItsOwnRecordGoesOn).
func (h *holder) refence(refusal error) error {
	h.refused++
	if h.refused > maxRefused {
		return fmt.Errorf("shard %d: %d commits refused in a row over a record that named this holding: %w", h.q, maxRefused, refusal)
	}
	ctx, cancel := context.WithTimeout(h.ctx, commitTimeout)
	defer cancel()
	a, err := h.wk.own.Authorize(ctx, h.unit, h.wk.cfg.Node, h.fence.Epoch)
	switch {
	case errors.Is(err, ownership.ErrHeld), errors.Is(err, ownership.ErrFenced), errors.Is(err, ownership.ErrFree):
		h.log.Warn("commit refused: the shard was taken over", "event", "fenced", "error", refusal, "record", err)
		return errLost
	case err != nil:
		h.log.Warn("commit refused, and the shard's record could not be read; committing again at the next tick", "error", err)
		return nil
	}
	h.log.Info("commit refused, but the shard's record still names this holding: committing again at its revision",
		"event", "refenced", "revision", a.Fence.Revision, "moved", a.Fence.Revision != h.fence.Revision)
	h.fence = a.Fence
	return nil
}

// commit writes c fenced by the shard's record and waits for the answer
// (the end of a graceful stop; tests), with commitEnded's outcomes.
func (h *holder) commit(c wire.ShardCursor) error {
	c, writes := h.stateFor(c)
	if c.Seq == h.committed.Seq && maps.Equal(c.Pending, h.committed.Pending) {
		return nil
	}
	return h.commitEnded(commitEnd{c: c, err: h.write(c, writes, h.fence, false)})
}

// commitTimeout bounds one commit: one to a bucket stream leader that
// died is made again, after the next tick, to the one elected, instead of
// waiting out jsapi.Timeout.
const commitTimeout = time.Second

// write stores c, with the state's writes, fenced by the shard's record
// at fence's revision. It touches no loop state: a commit in flight runs
// it in a goroutine. With writes, the commit is an atomic batch: shared,
// one part of the worker's shared batches (Worker.states), which carry
// the commits of all its shards that meet behind a batch in flight;
// else a batch of its own. A commit goes on its own after a refusal
// (refused > 0, until one is accepted): a shared batch is refused whole
// when one part's fence moved, and the holding whose fence did not move
// must not be refused with it again.
func (h *holder) write(c wire.ShardCursor, writes []store.IDStateWrite, fence fencing.Fence, shared bool) error {
	data, err := wire.EncodeShardCursor(c)
	if err != nil {
		return fmt.Errorf("shard %d: encode cursor: %w", h.q, err)
	}
	subj := wire.KeySubject(h.wk.w.Name, wire.CursorKey(h.unit))
	ctx, cancel := context.WithTimeout(context.WithoutCancel(h.ctx), commitTimeout)
	defer cancel()
	if len(writes) > 0 {
		msgs := store.ShardStateMsgs(h.wk.w.Name, fence, subj, data, writes)
		if shared {
			_, err = jsapi.Await(ctx, h.wk.states.Send(msgs))
		} else {
			_, err = jsapi.PublishBatch(ctx, handles.Of(h.wk.w).JS, msgs)
		}
		return err
	}
	m := &nats.Msg{Subject: subj, Data: data}
	fence.Apply(m)
	_, err = handles.Of(h.wk.w).JS.PublishMsg(ctx, m)
	return err
}

// removeDue starts a purge of the shard's mail below the last accepted
// cursor's bound, when it moved and the last removal is removeWait old (or
// now). One purge at a time per holder, and at most maxPurges per worker,
// each in a goroutine of its own: a purge of a large stream can take the
// server a while, and the holder delivers meanwhile. A failed purge makes
// the next wait twice as long (up to maxRemoveWait): a server that times
// purges out is not sent more of them.
func (h *holder) removeDue(now bool) {
	// Below 1 there is nothing to remove (a holding that has committed
	// nothing yet): such a purge would only put off the first real one
	// by removeWait.
	low := h.committed.Low()
	if h.removing || low <= max(h.removedTo, 1) || (!now && time.Since(h.lastRemove) < h.removeWait) {
		return
	}
	if h.wk.w.Config.Purge == world.PurgeByServer {
		// The owners of this world may not purge (fencepostd --auth):
		// fencepostd removes what the stored cursors cover
		// (purge.Purger.PurgeCommitted).
		h.removedTo = low
		return
	}
	select {
	case h.wk.purges <- struct{}{}:
	default:
		return // the worker's purges are all busy: the next tick
	}
	h.removing = true
	h.lastRemove = time.Now()
	go func() {
		defer func() { <-h.wk.purges }()
		ctx, cancel := jsapi.WithTimeout(context.WithoutCancel(h.ctx))
		err := jsapi.Purge(ctx, handles.Of(h.wk.w).JS.Conn(), wire.MailboxStream(h.wk.w.Name), wire.ShardFilter(h.wk.w.Name, h.q), low)
		cancel()
		select {
		case h.removals <- removal{low: low, err: err}:
		case <-h.ended:
		}
	}()
}

// removal is a purge's end.
type removal struct {
	low uint64
	err error
}

// removed takes a purge's end.
func (h *holder) removed(r removal) {
	h.removing = false
	if r.err != nil {
		h.removeWait = min(2*h.removeWait, maxRemoveWait)
		h.log.Warn("removal of committed mail failed; trying again", "below", r.low, "retry_in", h.removeWait, "error", r.err)
		return
	}
	h.removeWait = h.wk.cfg.RemoveEvery
	h.removedTo = max(h.removedTo, r.low)
	h.wk.removals.Add(1)
}

// maxPurges bounds a worker's purges in flight; maxRemoveWait a holder's
// wait between removals after failures.
const (
	maxPurges     = 4
	maxRemoveWait = 10 * time.Second
)

// finish is the end of a graceful stop: what was handled is committed and
// removed, so the next holder starts after it.
func (h *holder) finish() error {
	if h.committing {
		if err := h.commitEnded(<-h.commits); err != nil {
			return err
		}
	}
	for try := 0; ; try++ {
		c := h.b.cursor()
		if c.Seq == h.committed.Seq && maps.Equal(c.Pending, h.committed.Pending) {
			break
		}
		if err := h.commit(c); err != nil {
			return err
		}
		if try == 15 {
			return fmt.Errorf("shard %d: the last commit failed %d times", h.q, try+1)
		}
	}
	// The last removal: after any still running, within the drain's
	// bound (a purge not made is made by the next holder's).
	deadline := time.After(drainWait(h.wk.cfg.TTL))
	for done := false; !done; {
		if !h.removing {
			h.removeDue(true)
			if !h.removing {
				break
			}
		}
		select {
		case r := <-h.removals:
			h.removed(r)
			done = r.err == nil && h.removedTo >= h.committed.Low()
		case <-deadline:
			done = true
		}
	}
	return errDrained
}

// errDrained: the holding stopped as asked, its work committed.
var errDrained = errors.New("shard: drained")
