package queue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/fencing"
	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/ownership"
)

// Reminders: a timer a holder sets for its own id from its handler,
// fenced by the holding (docs/contract.md section 11; docs/wire.md
// "Reminders").
//
// A broker schedule can live only in the timer stream, and no write to
// it can be conditional on the holder's record, which is in the bucket
// stream (a conditional header acts within one stream). So a reminder is
// first a fact of the bucket stream, fenced there, and a schedule after:
//
//  1. Intent. Remind writes the reminder (its id, key, time, headers and
//     body: wire.Reminder) to the bucket key r.<eid>.<key>, in ONE write
//     with Nats-Expected-Last-Subject-Sequence = the fence's revision and
//     -Subject = the record's subject (jsapi.Fenced, the write behind
//     jsapi.Barrier). The bucket stream's leader checks the record's last
//     sequence and stores the intent in the same step, with a quorum: it
//     is stored only while the record is at the holder's revision. A
//     seized holder's intent is refused and nothing is stored, not the
//     intent and not a schedule (ErrReminderFenced). That is the fence; the
//     steps after it write nothing a stale holder could not have written
//     while it held, because they only carry out a stored intent.
//  2. Materialise (MaterialiseReminder; the holder at once, fencepostd for
//     a leftover). Read the intent's subject again through the leader:
//     if its last message is no longer the intent (a newer intent of the
//     same key replaced it, or it was materialised and deleted), stop.
//     Then read the timer subject's last message: if it carries
//     Fencepost-Reminder-Rev >= the intent's revision, this intent or a
//     newer one is already its schedule: stop. Else publish the schedule,
//     with that header, a message id unique to the intent
//     (wire.ReminderMsgID) and Nats-Expected-Last-Subject-Sequence = the
//     sequence just read: a write that came in between is read again (up
//     to remindTries times), never replaced unseen.
//  3. Delete the intent, conditional on its revision (a KV delete marker
//     with the intent's revision as the subject's expected last
//     sequence): a newer intent written meanwhile stays.
//
// Why an old intent never replaces a newer schedule: revisions of the
// bucket stream grow, a newer intent of the same key has a higher one,
// and a materialisation writes only over a subject whose last message
// carries a lower revision (or none: a producer's timer, or nothing),
// and only if that message is still the last one when it is stored. Why
// a superseded intent does not fire after the newer one fired (and left
// the subject empty): the newer intent replaced the old one's key, and
// step 2 first checks that the intent is still there.
//
// A crash (or a pause) at each step:
//   - before 1 is stored: nothing is stored; the message was not
//     committed, so the next holder handles it and sets the reminder
//     again.
//   - after 1, before 2: the intent is a committed fact (it was stored
//     while the holder held). fencepostd materialises every intent older
//     than its grace (daemon, reminderGrace): it fires at its time, or at
//     once if that passed. Without fencepostd it waits in the bucket.
//   - during 2, after the schedule is stored, before 3: the schedule
//     stands; the intent is left, and fencepostd's materialisation of it
//     finds the schedule (its revision) and only deletes the intent. If
//     the schedule fired meanwhile (its subject is then empty), the
//     schedule is published again with the same message id, which the
//     timer stream answers as a duplicate inside its dedupe window
//     (dedupe_window, 2 minutes by default): past it, or after a restart
//     of the timer stream's servers (the dedupe map is not kept), the
//     reminder fires a second time. At least once, as a timer across a
//     leader change.
//   - after 3: done.
//
// What is left: an intent written by a holder that is then seized and
// whose materialisation is slower than the new holder's own reminder of
// the same key being written, materialised and fired, all between the
// old one's two reads of step 2, fires after it (the two reads are of two
// streams; nothing makes them one).
//
// remindTries bounds the reads of step 2 when the subject changes under
// it.
const remindTries = 5

// ErrReminderFenced is matched by the error of a reminder that its
// holder may not set: the record is no longer at the fence's revision
// (ownership.ErrFenced, *ReminderFencedError).
var ErrReminderFenced = ownership.ErrFenced

// ReminderFencedError: the intent's fenced write was refused (nothing of
// the reminder is stored), or, Unanswered, it got no answer.
type ReminderFencedError struct {
	ID, Key string
	Fence   fencing.Fence
	// Stored, Revoked and RevokeErr are always false and nil: a refused
	// reminder stores nothing to undo (the design above). They are kept
	// for callers written against the earlier design.
	Stored    bool
	Revoked   bool
	RevokeErr error
	// Unanswered: the intent's write got no answer. It may have been
	// stored (the holding was then still current, and fencepostd
	// schedules it after its grace) or not; the error matches ErrUnknown
	// rather than ErrReminderFenced. Setting the reminder again with the
	// same key replaces it either way.
	Unanswered bool
	Cause      error // the write's refusal, or its error
}

func (e *ReminderFencedError) Error() string {
	if e.Unanswered {
		return fmt.Sprintf("queue: reminder %q of %q: the write of its intent fenced by %s got no answer (%v): it may be stored, and then fencepostd schedules it; set it again with the same key to know", e.Key, e.ID, e.Fence, e.Cause)
	}
	return fmt.Sprintf("queue: reminder %q of %q refused: the holding %s no longer holds the record (%v); nothing was stored", e.Key, e.ID, e.Fence, e.Cause)
}

// Is matches ErrReminderFenced (ownership.ErrFenced), or ErrUnknown when
// the write was Unanswered.
func (e *ReminderFencedError) Is(target error) bool {
	if e.Unanswered {
		return target == ErrUnknown
	}
	return target == ErrReminderFenced
}

// Remind sets a timer (WithAt or WithAfter, and WithTimerKey: required,
// so that a message handled again sets the same reminder again) for id,
// fenced by the holding f (drain.Message.Fence): id must be the fence's
// id, or in a sharded world an id of the fence's shard. The broker stores
// it only while f's record is unchanged: otherwise it returns
// *ReminderFencedError (ErrReminderFenced) with nothing stored. A
// WithMsgID is not used: the reminder's schedule carries a message id of
// its own (wire.ReminderMsgID). On success Posted.Seq is the schedule's
// sequence in the timer stream, or 0 when a newer reminder of the same key
// (or fencepostd) had scheduled it first. An error after the intent was
// stored says so: the reminder is set, and fencepostd schedules it.
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
	h := nats.Header{}
	for k, vs := range m.Header {
		switch k {
		case wire.HeaderSchedule, wire.HeaderScheduleTarget, HeaderMsgID:
		default:
			h[k] = vs
		}
	}
	if err := q.checkSize(len(body), HeaderSize(h)+wire.TimerReserve(q.world, id, o.timer.key)+wire.ReminderOverhead(id, o.timer.key)); err != nil {
		return Posted{}, err
	}
	in := wire.Reminder{ID: id, Key: o.timer.key, At: o.timer.at.UTC(), Header: h, Body: body}
	data, err := wire.EncodeReminder(in)
	if err != nil {
		return Posted{}, fmt.Errorf("%w: %w", ErrInvalidMessage, err)
	}
	if remindWrite != nil {
		remindWrite() // tests: a seizure right before the write
	}
	rev, err := q.writeIntent(ctx, f, in, data)
	if err != nil {
		return Posted{}, err
	}
	if remindIntent != nil && remindIntent() {
		// Tests: the process stops between the intent and its schedule.
		return Posted{ID: id, Key: in.Key, At: in.At}, nil
	}
	return q.materialise(ctx, in, rev)
}

// remindWrite, when set (by tests), runs right before Remind's intent is
// written.
var remindWrite func()

// remindIntent, when set (by tests), runs between Remind's intent and its
// materialisation; true makes Remind return there, as a process that
// stopped would leave it.
var remindIntent func() (stop bool)

// remindScheduled, when set (by tests), runs between a materialisation's
// schedule and its delete of the intent; true makes it return there.
var remindScheduled func() (stop bool)

// writeIntent is step 1: the intent's write fenced on f's record. It
// returns the intent's revision (its bucket stream sequence).
//
// On a replicated world a write of the record in flight (the holder's own
// renewal, say) makes the leader refuse the write for a moment: it is
// tried again, up to busyTries times.
func (q *Queue) writeIntent(ctx context.Context, f fencing.Fence, in wire.Reminder, data []byte) (uint64, error) {
	m := &nats.Msg{Subject: wire.ReminderSubject(q.world, in.ID, in.Key), Header: nats.Header{}, Data: data}
	for try := 1; ; try++ {
		res, ack, err := jsapi.Fenced(ctx, q.js, wire.BucketStream(q.world), m, f.RecordSubject(), f.Revision)
		switch {
		case errors.Is(err, jsapi.ErrBarrierUnanswered):
			return 0, &ReminderFencedError{ID: in.ID, Key: in.Key, Fence: f, Unanswered: true, Cause: err}
		case err != nil:
			return 0, fmt.Errorf("queue: reminder %q of %q: write its intent fenced by %s: %w; nothing was stored", in.Key, in.ID, f, q.refusal(in.ID, "", withCause(ctx, err)))
		case res == jsapi.BarrierMoved:
			return 0, &ReminderFencedError{ID: in.ID, Key: in.Key, Fence: f, Cause: errors.New("the record moved on")}
		case res == jsapi.BarrierBusy && try == busyTries:
			return 0, &ReminderFencedError{ID: in.ID, Key: in.Key, Fence: f, Cause: errors.New("a write of the record stayed in flight")}
		case res == jsapi.BarrierBusy:
			select {
			case <-ctx.Done():
				return 0, fmt.Errorf("queue: reminder %q of %q: %w; nothing was stored", in.Key, in.ID, ctx.Err())
			case <-time.After(busyPause):
			}
			continue
		}
		return ack.Sequence, nil
	}
}

// busyTries and busyPause bound writeIntent's tries while a write of the
// record is in flight.
const (
	busyTries = 5
	busyPause = 20 * time.Millisecond
)

// MaterialiseReminder schedules the reminder intent stored under bucket
// key (wire.ReminderKey) at revision rev with value (steps 2 and 3 above):
// Remind's own second step, and fencepostd's for the intents whose holder
// stopped before it. It is safe to run any number of times and
// concurrently: the schedule is written at most once per intent and never
// over a newer one, and the intent is deleted once it is scheduled. An
// intent that does not decode, or whose key does not name its id and key,
// is deleted (at rev) and reported with an error wrapping
// wire.ErrCorruptRecord.
func (q *Queue) MaterialiseReminder(ctx context.Context, key string, rev uint64, value []byte) (Posted, error) {
	in, err := wire.DecodeReminder(value)
	if err == nil {
		id, k, kerr := wire.ReminderOf(key)
		if kerr != nil || id != in.ID || k != in.Key {
			err = fmt.Errorf("%w: reminder intent of %q key %q stored under key %q", wire.ErrCorruptRecord, in.ID, in.Key, key)
		}
	}
	if err != nil {
		subj := wire.KeySubject(q.world, key)
		if derr := q.dropIntent(ctx, subj, rev); derr != nil {
			return Posted{}, fmt.Errorf("queue: reminder intent %s at revision %d: %w; deleting it failed: %v", key, rev, err, derr)
		}
		return Posted{}, fmt.Errorf("queue: reminder intent %s at revision %d: %w; deleted", key, rev, err)
	}
	return q.materialise(ctx, in, rev)
}

// materialise is steps 2 and 3 for the decoded intent in at rev.
func (q *Queue) materialise(ctx context.Context, in wire.Reminder, rev uint64) (Posted, error) {
	p := Posted{ID: in.ID, Key: in.Key, At: in.At}
	fail := func(what string, err error) (Posted, error) {
		return p, fmt.Errorf("queue: reminder %q of %q: its intent is stored (revision %d), its schedule not yet: %s: %w; fencepostd schedules it", in.Key, in.ID, rev, what, err)
	}
	isubj := wire.ReminderSubject(q.world, in.ID, in.Key)
	cur, err := jsapi.LeaderGet(ctx, q.js.Conn(), wire.BucketStream(q.world), jsapi.GetRequest{LastFor: isubj})
	switch {
	case errors.Is(err, jsapi.ErrNotFound):
		return p, nil // deleted with its key (a reset)
	case err != nil:
		return fail("read the intent", err)
	case cur.Sequence != rev:
		return p, nil // a newer intent replaced it, or it was scheduled and deleted
	}
	m := q.schedule(in.ID, in.Key, in.At, reminderHeader(in, rev), in.Body)
	for try := 1; ; try++ {
		last, err := q.lastOn(ctx, m.Subject)
		if err != nil {
			return fail("read its timer", err)
		}
		if r, ok := reminderRev(last); ok && r >= rev {
			if r == rev {
				p.Seq = last.Sequence
			}
			break // this intent, or a newer one, is scheduled already
		}
		ack, err := q.js.PublishMsg(ctx, m, jetstream.WithExpectLastSequencePerSubject(seqOf(last)))
		if isWrongLast(err) && try < remindTries {
			continue // the timer changed since it was read: read it again
		}
		if err != nil {
			return fail("store its schedule", q.refusal(in.ID, "", withCause(ctx, err)))
		}
		p.Seq, p.Duplicate = ack.Sequence, ack.Duplicate
		break
	}
	if remindScheduled != nil && remindScheduled() {
		return p, nil // tests: the process stops before the delete
	}
	// The schedule stands whether or not the intent goes: an intent left
	// is found by fencepostd, which finds its schedule (or, inside the
	// dedupe window, a duplicate) and deletes it.
	_ = q.dropIntent(ctx, isubj, rev)
	return p, nil
}

// reminderHeader is the schedule's headers of intent in at rev: its own,
// the revision, and the intent's message id.
func reminderHeader(in wire.Reminder, rev uint64) nats.Header {
	h := make(nats.Header, len(in.Header)+4)
	for k, vs := range in.Header {
		h[k] = append([]string(nil), vs...)
	}
	h.Set(wire.HeaderReminderRev, strconv.FormatUint(rev, 10))
	h.Set(HeaderMsgID, wire.ReminderMsgID(in.ID, in.Key, rev))
	return h
}

// reminderRev is the intent revision a timer subject's last message
// materialised, if it is a reminder's schedule.
func reminderRev(m *jetstream.RawStreamMsg) (uint64, bool) {
	if m == nil {
		return 0, false
	}
	v := m.Header.Get(wire.HeaderReminderRev)
	if v == "" {
		return 0, false
	}
	r, err := strconv.ParseUint(v, 10, 64)
	return r, err == nil
}

// dropIntent deletes the intent on subject stored at rev, if it is still
// the subject's last message (a KV delete marker): a newer intent, or a
// delete already made, stays.
func (q *Queue) dropIntent(ctx context.Context, subject string, rev uint64) error {
	m := nats.NewMsg(subject)
	m.Header.Set(jsapi.HeaderKVOperation, jsapi.KVOpDelete)
	_, err := q.js.PublishMsg(ctx, m, jetstream.WithExpectLastSequencePerSubject(rev))
	if isWrongLast(err) {
		return nil
	}
	return err
}

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
