package drain

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/world"
)

// serverPurges says whether the world's committed messages are removed by
// the server's purger (PurgeCommitted) rather than by the drains: in such
// a world owners have no permission to purge (docs/security.md).
func (d *Drainer) serverPurges() bool { return d.cfg.Purge == world.PurgeByServer }

// PurgeCommitted removes committed messages from the world's mailboxes
// until ctx ends: it follows every stored cursor (c.<id>) and purges id's
// mailbox below it. fencepostd runs it for the worlds whose config says
// purge=server, so that owners, who may not call the purge API there,
// never need to.
//
// Only what a stored cursor covers is removed, as with a drain's own purge
// (design.md 3.4): a cursor is stored only by a fenced commit of the
// current holder, and delivery resumes after it, so a purge that is late or
// never runs costs space, never a redelivery or a loss. Cursor updates that
// arrive while a purge runs are merged, so the purger keeps up with any
// commit rate at the cost of some delay.
func (d *Drainer) PurgeCommitted(ctx context.Context) error {
	w, err := d.w.KV.Watch(ctx, wire.CursorPrefix+"*", jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("drain: purger of %q: watch cursors: %w", d.world, err)
	}
	defer w.Stop()
	var (
		mu      sync.Mutex
		pending = map[string]uint64{} // mailbox subject -> purge below
		wake    = make(chan struct{}, 1)
		done    = map[string]uint64{} // purged below, per subject
		ended   = make(chan struct{})
	)
	go func() {
		defer close(ended)
		for e := range w.Updates() {
			if e == nil {
				continue // the end of the initial values
			}
			c, err := DecodeCursor(e.Value())
			if err != nil {
				d.log.Warn("drain: purger: unreadable cursor left alone", "world", d.world, "key", e.Key(), "error", err)
				continue
			}
			subj := "fp." + d.world + ".mb." + strings.TrimPrefix(e.Key(), wire.CursorPrefix)
			mu.Lock()
			pending[subj] = max(pending[subj], c.Seq+1)
			mu.Unlock()
			select {
			case wake <- struct{}{}:
			default:
			}
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ended:
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("drain: purger of %q: the watch of the cursors ended", d.world)
		case <-wake:
		}
		mu.Lock()
		batch := pending
		pending = map[string]uint64{}
		mu.Unlock()
		var failed []string
		var fmu sync.Mutex
		subjs := make([]string, 0, len(batch))
		for subj, below := range batch {
			if below > done[subj] {
				subjs = append(subjs, subj)
			}
		}
		parallel(len(subjs), func(i int) {
			subj := subjs[i]
			pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			err := d.w.Mailbox.Purge(pctx, jetstream.WithPurgeSubject(subj), jetstream.WithPurgeSequence(batch[subj]))
			if err != nil {
				if !errors.Is(err, context.Canceled) {
					d.log.Warn("drain: purger: purge of committed messages failed; retrying", "world", d.world, "subject", subj, "error", err)
				}
				fmu.Lock()
				failed = append(failed, subj)
				fmu.Unlock()
			}
		})
		mu.Lock()
		for _, subj := range subjs {
			done[subj] = batch[subj]
		}
		for _, subj := range failed {
			delete(done, subj)
			pending[subj] = max(pending[subj], batch[subj])
		}
		mu.Unlock()
		if len(failed) > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(time.Second):
			}
			select {
			case wake <- struct{}{}:
			default:
			}
		}
	}
}
