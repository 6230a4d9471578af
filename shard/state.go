package shard

import (
	"fmt"
	"slices"

	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/store"
	"github.com/fencepost/fencepost/internal/wire"
)

// Per-id state on a sharded world, committed exactly once.
//
// A handler of id X's message m reads X's state as of the message of X
// before m, and stages writes; the writes are committed in one atomic
// batch with the shard's cursor, every message of the batch fenced by the
// shard's record: all of it is stored, or none. A batch carries the
// writes of exactly the handled messages its cursor newly covers: those
// at or below its mark (a handled message is never in a pending id's
// exception, which starts at the id's first message not yet handled). A
// handled message above the mark (a message of another id before it is
// still with its handler) keeps its writes for a later batch, whose
// cursor covers it. So the stored state of every id is always that of
// exactly the messages the stored cursor covers: a message is never
// applied without being committed, nor committed without its writes, and
// the next holder, which redelivers what the cursor does not cover, reads
// the state without their effect.

// handled is the writes of one acknowledged message of an id.
type handled struct {
	seq    uint64
	writes []store.StateWrite
}

// maxBatchWrites bounds the state writes of one commit: the atomic batch
// takes 1,000 messages, the cursor one of them.
const maxBatchWrites = 999

// callWithState runs the handler for m, one message of a call's batch,
// with the id's state st, reading it first if this holding does not know
// it yet (then r.st is the state read). It sets r.err, appends m's writes
// to r.handled if the handler acknowledged m, and returns the state the
// batch's next message gets.
func (h *holder) callWithState(r *result, e *entry, m drain.Message, st *drain.IDState) *drain.IDState {
	if st == nil {
		ctx, cancel := jsapi.WithTimeout(h.hctx)
		read, err := store.LoadStateWith(ctx, h.wk.w, e.id, wire.KeySubject(h.wk.w.Name, wire.CursorKey(h.unit)), h.cursorAt)
		cancel()
		if err != nil {
			r.notRun, r.err = true, fmt.Errorf("read the state of %q: %w", e.id, err)
			return nil
		}
		st = drain.NewIDState(read)
		r.st = st
	}
	m.State = st.Message()
	if r.err = h.wk.handle(h.hctx, m); r.err == nil {
		r.handled = append(r.handled, handled{seq: m.Seq, writes: st.Ack(m.State)})
	}
	return st
}

// stateFor is the commit of c with the state's writes: the writes of the
// handled messages at or below c's mark, each key's last value per id,
// in one batch. When they would not fit in one batch, the cursor stops at
// the last message whose writes fit (everything at or below it is done
// or excused, as at or below the mark), and the rest goes with the next.
func (h *holder) stateFor(c wire.ShardCursor) (wire.ShardCursor, []store.IDStateWrite) {
	if !h.wk.cfg.State || len(h.unc) == 0 {
		return c, nil
	}
	type one struct {
		id  string
		eid string
		handled
	}
	var due []one
	n := 0 // the writes of due, a bound of what the batch carries
	for eid, hs := range h.unc {
		id, err := wire.DecodeID(eid)
		if err != nil {
			continue // never: the book's tokens are decoded ids'
		}
		for _, x := range hs {
			if !c.Committed(eid, x.seq) {
				break
			}
			due = append(due, one{id, eid, x})
			n += len(x.writes)
		}
	}
	if n > maxBatchWrites {
		// The batch may have to stop before a message: in stream order.
		// Otherwise the order is each id's own, which is all the last
		// value of a key needs.
		slices.SortFunc(due, func(a, b one) int { return cmpU64(a.seq, b.seq) })
	}
	last := map[[2]string]int{} // (id, key) -> index in writes
	var writes []store.IDStateWrite
	for i, x := range due {
		added := 0
		for _, w := range x.writes {
			if _, ok := last[[2]string{x.id, w.Key}]; !ok {
				added++
			}
		}
		if len(writes)+added > maxBatchWrites {
			// Stop before message x: the cursor covers what is before it.
			c = c.Below(due[i].seq)
			break
		}
		for _, w := range x.writes {
			k := [2]string{x.id, w.Key}
			if j, ok := last[k]; ok {
				writes[j].Value = w.Value
				continue
			}
			last[k] = len(writes)
			writes = append(writes, store.IDStateWrite{ID: x.id, StateWrite: w})
		}
	}
	return c, writes
}

// stateCommitted drops the writes a commit of c carried, and forgets the
// state of ids with nothing left to commit once the holding knows many.
// It drops only the writes of messages c covers (ShardCursor.Committed):
// a pending id's messages handled while c was in flight (its retry
// succeeded) are at or below c's mark and above its exception, not
// covered, and their writes go with the next commit. Dropping every write
// at or below the mark lost them while the cursor went on to cover their
// messages: a count short for ever
// (TestStateCommitted_KeepsWhatTheCursorDoesNotCover).
func (h *holder) stateCommitted(c wire.ShardCursor) {
	if !h.wk.cfg.State {
		return
	}
	for eid, hs := range h.unc {
		i := 0
		for i < len(hs) && c.Committed(eid, hs[i].seq) {
			i++
		}
		if i == len(hs) {
			delete(h.unc, eid)
		} else {
			h.unc[eid] = hs[i:]
		}
	}
	if len(h.states) > maxStates {
		for eid := range h.states {
			if _, busy := h.b.ids[eid]; !busy && len(h.unc[eid]) == 0 {
				delete(h.states, eid)
			}
		}
	}
}

// maxStates is the ids' states a holding keeps before it forgets those
// with nothing to commit (read again at their next message).
const maxStates = 4096

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
