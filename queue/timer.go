package queue

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/world"
)

// Timers (docs/contract.md section 11; docs/wire.md "Timers"). A send
// with WithAt or WithAfter is a timer: the message enters the id's
// mailbox at that time, never before, and from then on is an ordinary
// message. It is stored at once as a broker message schedule in the
// world's timer stream, on a subject of its own (the id and the timer's
// key); the server publishes it at its time, and the mailbox stream takes
// it in (world/timer.go).

// ErrInvalidTimer: a timer's time, delay or key is not acceptable (a time
// in the past, a delay that is not positive, a time too far ahead, a key
// of the wrong form). Nothing was stored.
var ErrInvalidTimer = errors.New("queue: invalid timer")

// MaxAhead is how far ahead a timer may be set.
const MaxAhead = 366 * 24 * time.Hour

// PastTolerance is how far in the past WithAt may be (a clock a little
// behind, a time computed a moment ago): such a timer fires at once.
const PastTolerance = time.Second

// WithAt makes the send a timer: the message enters the id's mailbox at
// t, by the timer stream leader's clock, and never before. t may be up
// to PastTolerance in the past (it fires at once) and up to MaxAhead in
// the future; anything else is ErrInvalidTimer.
func WithAt(t time.Time) SendOption {
	return func(o *sendOptions) { o.timer.at, o.timer.atSet = t, true }
}

// WithAfter makes the send a timer that fires d from now (this
// process's clock): WithAt(time.Now().Add(d)). d must be positive.
func WithAfter(d time.Duration) SendOption {
	return func(o *sendOptions) { o.timer.after, o.timer.afterSet = d, true }
}

// WithTimerKey names a timer: 1 to 64 bytes of A-Z, a-z, 0-9, '-' and
// '_', not starting with '_'. A timer is its id and key: a send with the
// key of a pending timer replaces it, and the key cancels it. Without
// it, a timer's key is derived from its WithMsgID (so that a retry names
// the same timer), or made at random; Posted.Key says which.
func WithTimerKey(key string) SendOption {
	return func(o *sendOptions) { o.timer.key, o.timer.keySet = key, true }
}

// IsTimer says whether opts make a send a timer (WithAt, WithAfter).
func IsTimer(opts ...SendOption) bool {
	var o sendOptions
	for _, opt := range opts {
		opt(&o)
	}
	return o.timer.set()
}

// timerOpts are a send's timer options, and once resolved (resolve) the
// timer's time and key.
type timerOpts struct {
	at       time.Time
	atSet    bool
	after    time.Duration
	afterSet bool
	key      string
	keySet   bool
}

// set says whether the send is a timer.
func (t timerOpts) set() bool { return t.atSet || t.afterSet }

// resolve checks the timer options and fixes the timer's time and key.
func (t *timerOpts) resolve(id, msgID string, now time.Time) error {
	switch {
	case !t.set():
		return fmt.Errorf("%w: a timer key without WithAt or WithAfter", ErrInvalidTimer)
	case t.atSet && t.afterSet:
		return fmt.Errorf("%w: give WithAt or WithAfter, not both", ErrInvalidTimer)
	case t.afterSet && t.after <= 0:
		return fmt.Errorf("%w: the delay %v is not positive: give a delay above 0", ErrInvalidTimer, t.after)
	case t.afterSet:
		t.at = now.Add(t.after)
	case t.at.IsZero():
		return fmt.Errorf("%w: no time given", ErrInvalidTimer)
	case t.at.Before(now.Add(-PastTolerance)):
		return fmt.Errorf("%w: %s is %v in the past (at most %v is taken, and fires at once)", ErrInvalidTimer,
			t.at.UTC().Format(time.RFC3339Nano), now.Sub(t.at).Round(time.Millisecond), PastTolerance)
	}
	if t.at.After(now.Add(MaxAhead)) {
		return fmt.Errorf("%w: %s is more than %v ahead", ErrInvalidTimer, t.at.UTC().Format(time.RFC3339Nano), MaxAhead)
	}
	switch {
	case t.keySet:
		if err := wire.ValidateTimerKey(t.key); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidTimer, err)
		}
	case msgID != "":
		t.key = msgIDTimerKey(id, msgID)
	default:
		t.key = "_" + rand.Text()
	}
	return nil
}

// msgIDTimerKey is the key of a timer sent with a message id and no key
// of its own: the same for every retry, and of fencepost's own form
// (starting '_'), which no given key has.
func msgIDTimerKey(id, msgID string) string {
	sum := sha256.Sum256([]byte(wire.ScopedMsgID(id, msgID)))
	return "_m" + base64.RawURLEncoding.EncodeToString(sum[:16])
}

// posted is the outcome of a stored send: a post, or a timer with its
// key and time.
func (t timerOpts) posted(id string, ack *jetstream.PubAck) Posted {
	p := Posted{ID: id, Seq: ack.Sequence, Duplicate: ack.Duplicate}
	if t.set() {
		p.Key, p.At = t.key, t.at.UTC()
	}
	return p
}

// timerMessage turns a send's validated headers and body into the
// schedule message of a timer, on its subject of the timer stream: the
// same headers (the sender, the message id, the caller's), and the
// schedule's. The timer's own headers must leave wire.TimerReserve of
// max_headers free, so that the schedule and the fired copy fit.
func (q *Queue) timerMessage(id string, body []byte, h nats.Header, o *sendOptions) (*nats.Msg, error) {
	if !q.timers {
		return nil, fmt.Errorf("queue: timer for %q: %w; nothing was stored", id, errNoTimers(q.world))
	}
	if err := o.timer.resolve(id, o.msgID, time.Now()); err != nil {
		return nil, err
	}
	reserve := wire.TimerReserve(q.world, id, o.timer.key)
	if err := q.checkSize(len(body), HeaderSize(h)+reserve); err != nil {
		var tl *TooLargeError
		if errors.As(err, &tl) && tl.Of == LimitMaxHeaders {
			return nil, fmt.Errorf("%w (a timer's headers leave %d bytes of max_headers to the broker's)", err, reserve)
		}
		return nil, err
	}
	return q.schedule(id, o.timer.key, o.timer.at, h, body), nil
}

// schedule is the schedule message of id's timer key firing at at, with
// the timer's own headers h (which it takes) and body.
func (q *Queue) schedule(id, key string, at time.Time, h nats.Header, body []byte) *nats.Msg {
	h.Set(wire.HeaderSchedule, wire.ScheduleAt(at.UTC().Format(time.RFC3339Nano)))
	h.Set(wire.HeaderScheduleTarget, wire.FiredSubject(q.world, id))
	return &nats.Msg{Subject: wire.TimerSubject(q.world, id, key), Header: h, Data: body}
}

// errNoTimers is the refusal of a timer to a world without a timer
// stream (world.ErrNoTimers).
func errNoTimers(name string) error {
	return fmt.Errorf("world %q, stream %s: %w", name, wire.TimerStream(name), world.ErrNoTimers)
}

// refused is refusal for any send: a timer whose publish found no stream
// says that the world takes no timers.
func (q *Queue) refused(id string, o sendOptions, err error) error {
	if o.timer.set() && (errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders)) {
		return fmt.Errorf("queue: timer for %q: no stream takes subject %s: %w; nothing was stored: %w", id, wire.TimerSubject(q.world, id, o.timer.key), errNoTimers(q.world), err)
	}
	return q.refusal(id, o.msgID, err)
}
