package daemon

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/wire"
)

// Cursors written by another node's owner (docs/security.md, "Who wrote
// it").
//
// A cursor says what left a mailbox: in a purge=server world fencepostd's
// purger removes what it covers. The owner role may write every key under
// c.>, so a node owner could write the cursor of an id (or shard) another
// node holds, at or below the stream's last sequence (one above it the
// purger refuses by itself), and the purger would remove that node's mail
// before it was delivered. The owners' account imports cursor writes with
// Share, like record and state writes (writers.go), so the auditor knows
// each one's writer; a cursor written by a node owner whose node is not
// the one its unit's record names (the holder, or the last holder) is
// forged: it is put back to the last cursor the auditor judged genuine
// (deleted when it knows none), by compare-and-swap at the forged
// revision, and the purger, which asks the auditor about each cursor
// before it purges below it, purges nothing for it.

// ForgedCursorNode is the kind of a cursor of a unit a node holds (or
// held last) written by another node's owner.
const ForgedCursorNode = "cursor_node"

// cursorJudgeWait bounds the purger's wait for the auditor's verdict on
// one cursor; past it the purge is tried again later.
const cursorJudgeWait = 5 * time.Second

// verdicts are the auditor's judgements of cursor writes, kept by the
// daemon across restarts of the auditor's watch.
type verdicts struct {
	mu      sync.Mutex
	upTo    uint64        // the bucket stream's sequence the auditor has judged up to
	changed chan struct{} // closed and replaced at every judgement
	last    map[string]verdict
}

// verdict is the judgement of a key's latest cursor write the auditor saw.
type verdict struct {
	rev    uint64
	forged bool
	value  []byte // the last genuine value (nil: none known)
}

func newVerdicts() *verdicts {
	return &verdicts{changed: make(chan struct{}), last: map[string]verdict{}}
}

// judged records the auditor's judgement of revision rev of cursor key,
// and that it judged the bucket up to there.
func (v *verdicts) judged(key string, rev uint64, forged bool, value []byte) {
	v.mu.Lock()
	defer v.mu.Unlock()
	last := v.last[key]
	if rev >= last.rev {
		if !forged {
			last.value = value
		}
		last.rev, last.forged = rev, forged
		v.last[key] = last
	}
	v.advance(rev)
}

// advance records that the auditor judged the bucket up to rev. v.mu is
// held.
func (v *verdicts) advance(rev uint64) {
	if rev > v.upTo {
		v.upTo = rev
		close(v.changed)
		v.changed = make(chan struct{})
	}
}

// judgedUpTo records that the auditor judged the bucket up to rev.
func (v *verdicts) judgedUpTo(rev uint64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.advance(rev)
}

// lastGenuine is the value of key's last cursor judged genuine.
func (v *verdicts) lastGenuine(key string) ([]byte, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	g := v.last[key].value
	return g, g != nil
}

// genuine is the purger's judge (purge.WithJudge): it waits until the
// auditor has judged the bucket up to rev, then says whether revision rev
// of cursor key may be purged below. A revision older than the key's
// latest judged one is not (the purger meets the newer one too).
func (v *verdicts) genuine(ctx context.Context, key string, rev uint64) (bool, error) {
	deadline := time.NewTimer(cursorJudgeWait)
	defer deadline.Stop()
	for {
		v.mu.Lock()
		if v.upTo >= rev {
			last, ok := v.last[key]
			v.mu.Unlock()
			return !ok || (last.rev == rev && !last.forged), nil
		}
		changed := v.changed
		v.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return false, ctx.Err()
		case <-deadline.C:
			return false, fmt.Errorf("the auditor has not judged the bucket up to %d yet", rev)
		}
	}
}

// cursor judges a cursor write c.<token>: forged when a node owner wrote
// it and the unit's record (o.<token>, seen before it in the stream)
// names another node. A write whose writer is not known (fencepostd did
// not see it in flight) or was not a node owner is taken as it is.
func (a *auditor) cursor(ctx context.Context, e *entry) {
	rk := wire.RecordPrefix + strings.TrimPrefix(e.key, wire.CursorPrefix)
	by, known := a.writerOf(e)
	holder, held := a.holders[rk]
	forged := e.op == jetstream.KeyValuePut && known && by.bound && (!held || holder != by.node)
	v := a.d.verdicts
	if !forged {
		var value []byte
		if e.op == jetstream.KeyValuePut {
			value = e.value
		}
		v.judged(e.key, e.rev, false, value)
		return
	}
	// Judged forged before it is undone: the purger must never purge
	// below it, whatever the repair's fate.
	v.judged(e.key, e.rev, true, nil)
	if _, err := wire.DecodeID(strings.TrimPrefix(e.key, wire.CursorPrefix)); err != nil {
		return // no key of a unit (c.* with a literal '*'): the purger refuses it, and it cannot be rewritten
	}
	last, restore := v.lastGenuine(e.key)
	var err error
	if restore {
		_, err = a.kv.Update(ctx, e.key, last, e.rev)
	} else {
		err = a.kv.Delete(ctx, e.key, jetstream.LastRevision(e.rev))
	}
	a.report(ForgedCursorNode, e, err, "written_by", by.String(), "holder", holder, "restored", restore)
}
