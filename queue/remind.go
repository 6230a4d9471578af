package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/fencing"
	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/ownership"
)

// Reminders: a timer a holder sets for its own id from its handler,
// fenced by the holding (docs/contract.md section 11).
//
// A fully fenced reminder, one the broker stores only while the holder's
// record is at its revision, is not possible with JetStream's
// primitives: a conditional header (Nats-Expected-Last-Subject-Sequence
// with -Subject) and an atomic batch act within one stream, the record
// is in the bucket stream, and a schedule can live only in a stream that
// allows schedules, which must allow rollups and may not discard new
// messages: neither the bucket (whose rollups would let one key's writer
// wipe every record) nor the mailbox stream (a full mailbox refuses a
// post) can be one. A schedule's target must be in its own stream too.
//
// Remind is the strongest variant the primitives give, with no clock in
// it: check, write conditionally, check again, undo.
//
//  1. Read the timer subject's last message through the stream leader
//     (its sequence L, and the schedule there if any).
//  2. Fence check: a barrier write in the bucket stream conditional on
//     the record's revision (jsapi.Barrier). Refused: the holder was
//     seized; nothing is written (ErrFenced).
//  3. Store the schedule conditional on the timer subject's last
//     sequence being L: it replaces what step 1 read, never a schedule
//     written since (a new holder's, a producer's: read again, up to
//     remindTries times).
//  4. Fence check again. Stored: the reminder stands. Refused (the
//     holder was seized between 2 and 4), unanswered or busy: undo it,
//     conditional on the subject's last sequence being the one step 3
//     stored: the schedule step 1 read is written back (a schedule whose
//     time passed meanwhile fires at once), or, if there was none, a
//     marker without a schedule that removes ours and expires in a
//     second; and return ErrFenced. A newer write on the subject is kept.
//
// What this guarantees: a holder seized before step 2 stores nothing; a
// holder seized before step 4 leaves nothing once Remind returns. What it
// does not: a holder that stops (a crash, a pause longer than the
// seizure) after step 3 and before its undo leaves a reminder stored
// after it was seized. Its message was not committed (the handler had
// not returned), so the next holder handles it again, and a handler that
// sets the reminder again with the same key replaces it (step 1 reads
// it, step 3 writes over it).
//
// remindTries bounds the reads of step 1 when the subject changes under
// step 3.
const remindTries = 5

// ErrReminderFenced is matched by the error of a reminder that its
// holder may not set: the record is no longer at the fence's revision
// (ownership.ErrFenced, *ReminderFencedError).
var ErrReminderFenced = ownership.ErrFenced

// ReminderFencedError: the fence was refused (or, Unanswered, the second
// check got no answer); nothing of the reminder is left stored, unless
// Revoked says otherwise.
type ReminderFencedError struct {
	ID, Key string
	Fence   fencing.Fence
	// Stored: the schedule had been stored before the second check, and
	// was undone (Revoked) or could not be (Revoked false: it may stand;
	// RevokeErr says why).
	Stored    bool
	Revoked   bool
	RevokeErr error
	// Unanswered: the second check got no answer (the holding may still
	// be current); the reminder was undone all the same, and the error
	// matches ErrUnknown rather than ErrReminderFenced.
	Unanswered bool
	Cause      error // the check's refusal, or its error
}

func (e *ReminderFencedError) Error() string {
	what := "the holding %s no longer holds the record (%v)"
	if e.Unanswered {
		what = "the check of the holding %s got no answer (%v)"
	}
	s := fmt.Sprintf("queue: reminder %q of %q refused: "+what, e.Key, e.ID, e.Fence, e.Cause)
	switch {
	case e.Stored && e.Revoked:
		s += "; it had been stored and was undone"
	case e.Stored:
		s += fmt.Sprintf("; it had been stored, and undoing it failed (%v): it may fire", e.RevokeErr)
	default:
		s += "; nothing was stored"
	}
	return s
}

// Is matches ErrReminderFenced (ownership.ErrFenced), or ErrUnknown when
// the second check was Unanswered.
func (e *ReminderFencedError) Is(target error) bool {
	if e.Unanswered {
		return target == ErrUnknown
	}
	return target == ErrReminderFenced
}

// Remind sets a timer (WithAt or WithAfter, and WithTimerKey: required,
// so that a message handled again sets the same reminder again) for id,
// fenced by the holding f (drain.Message.Fence): id must be the fence's
// id, or in a sharded world an id of the fence's shard. It returns
// *ReminderFencedError (ErrReminderFenced) when the record has moved on,
// with nothing stored (see the steps above for the one case that leaves
// it stored), and the errors of Send.
func (q *Queue) Remind(ctx context.Context, f fencing.Fence, id string, body []byte, opts ...SendOption) (Posted, error) {
	if err := q.fenceCovers(f, id); err != nil {
		return Posted{}, err
	}
	m, o, err := q.message(id, body, opts)
	switch {
	case err != nil:
		return Posted{}, err
	case !o.timer.set():
		return Posted{}, fmt.Errorf("%w: a reminder needs WithAt or WithAfter", ErrInvalidTimer)
	case !o.timer.keySet:
		return Posted{}, fmt.Errorf("%w: a reminder needs WithTimerKey: a message handled again then sets the same reminder again", ErrInvalidTimer)
	}
	for try := 1; ; try++ {
		prev, err := q.lastOn(ctx, m.Subject)
		if err != nil {
			return Posted{}, fmt.Errorf("queue: reminder %q of %q: read its timer: %w; nothing was stored", o.timer.key, id, err)
		}
		if moved, err := q.checkFence(ctx, f); err != nil {
			return Posted{}, fmt.Errorf("queue: reminder %q of %q: check the fence %s: %w; nothing was stored", o.timer.key, id, f, err)
		} else if moved != nil {
			return Posted{}, &ReminderFencedError{ID: id, Key: o.timer.key, Fence: f, Cause: moved}
		}
		ack, err := q.js.PublishMsg(ctx, m, jetstream.WithExpectLastSequencePerSubject(seqOf(prev)))
		if isWrongLast(err) && try < remindTries {
			continue // the timer changed since step 1: read it again
		}
		if err != nil {
			return Posted{}, q.refused(id, o, withCause(ctx, err))
		}
		if remindStored != nil {
			remindStored() // tests: a seizure between the store and the check
		}
		if moved, err := q.checkFence(ctx, f); moved != nil || err != nil {
			rerr := q.revoke(context.WithoutCancel(ctx), m.Subject, ack.Sequence, prev)
			fe := &ReminderFencedError{ID: id, Key: o.timer.key, Fence: f, Stored: true, Revoked: rerr == nil, RevokeErr: rerr, Cause: moved}
			if err != nil {
				fe.Unanswered, fe.Cause = true, err
			}
			return Posted{}, fe
		}
		return o.timer.posted(id, ack), nil
	}
}

// remindStored, when set (by tests), runs between Remind's store and its
// second check.
var remindStored func()

// fenceCovers checks that f's holding is id's: f names id, or (sharded
// world) id's shard.
func (q *Queue) fenceCovers(f fencing.Fence, id string) error {
	if err := wire.ValidateID(id); err != nil {
		return err
	}
	unit := id
	if q.shards > 0 {
		unit = wire.ShardUnit(wire.ShardOf(id, q.shards))
	}
	if f.World != q.world || f.ID != unit {
		return fmt.Errorf("%w: the fence %s does not hold %q of world %q: a holder sets reminders for its own ids", ErrInvalidTimer, f, id, q.world)
	}
	return nil
}

// checkFence is the fence check: both nil when the barrier was stored,
// so the record was at f's revision then; moved says why it was refused;
// err is a check that got no answer or failed.
//
// On a replicated world a write of the record in flight (the holder's own
// renewal, say) makes the leader refuse the barrier for a moment: it is
// tried again, up to busyTries times.
func (q *Queue) checkFence(ctx context.Context, f fencing.Fence) (moved, err error) {
	for try := 1; ; try++ {
		res, err := jsapi.Barrier(ctx, q.js, wire.BucketStream(q.world), wire.BarrierSubject(q.world), f.RecordSubject(), f.Revision)
		switch {
		case err != nil:
			return nil, err
		case res == jsapi.BarrierMoved:
			return errors.New("the record moved on"), nil
		case res == jsapi.BarrierBusy && try == busyTries:
			return errors.New("a write of the record stayed in flight"), nil
		case res == jsapi.BarrierBusy:
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(busyPause):
			}
			continue
		}
		return nil, nil
	}
}

// busyTries and busyPause bound checkFence's tries while a write of the
// record is in flight.
const (
	busyTries = 5
	busyPause = 20 * time.Millisecond
)

// lastOn is subject's last message in the timer stream, read through the
// stream leader; nil when it has none.
func (q *Queue) lastOn(ctx context.Context, subject string) (*jetstream.RawStreamMsg, error) {
	m, err := jsapi.LeaderGet(ctx, q.js.Conn(), wire.TimerStream(q.world), jsapi.GetRequest{LastFor: subject})
	if errors.Is(err, jsapi.ErrNotFound) {
		return nil, nil
	}
	return m, err
}

func seqOf(m *jetstream.RawStreamMsg) uint64 {
	if m == nil {
		return 0
	}
	return m.Sequence
}

// isWrongLast is the refusal of a write whose expected last sequence did
// not hold (10071; 10164 on replicated streams).
func isWrongLast(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// revokeTimeout bounds an undo, which runs also after the caller's
// context ended.
const revokeTimeout = 5 * time.Second

// revoke undoes the schedule stored at seq on subject, if it is still the
// subject's last message: it writes back prev (the schedule that was
// there before) or, with none, a marker without a schedule that rolls
// the subject up (so the schedule is gone) and expires in a second.
func (q *Queue) revoke(ctx context.Context, subject string, seq uint64, prev *jetstream.RawStreamMsg) error {
	ctx, cancel := context.WithTimeout(ctx, revokeTimeout)
	defer cancel()
	m := nats.NewMsg(subject)
	if prev != nil && prev.Header.Get(wire.HeaderSchedule) != "" {
		for k, vs := range prev.Header {
			// The server adds the rollup; the message id would be a
			// duplicate; the expectations were the earlier write's.
			if k == "Nats-Rollup" || k == HeaderMsgID || strings.HasPrefix(k, "Nats-Expected-") {
				continue
			}
			m.Header[k] = vs
		}
		m.Data = prev.Data
	} else {
		m.Header.Set("Nats-Rollup", "sub")
		m.Header.Set("Nats-TTL", "1s")
	}
	_, err := q.js.PublishMsg(ctx, m, jetstream.WithExpectLastSequencePerSubject(seq))
	if !isWrongLast(err) {
		return err
	}
	// Ours is no longer the last: a newer write replaced it, or it fired
	// (or was cancelled) already.
	last, lerr := q.lastOn(ctx, subject)
	switch {
	case lerr != nil:
		return fmt.Errorf("the timer changed, and reading it failed: %w", lerr)
	case last != nil && last.Sequence > seq:
		return nil
	}
	return errors.New("the timer is gone from its subject: it fired or was cancelled already")
}
