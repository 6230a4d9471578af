package verify

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/queue"
	"github.com/fencepost/fencepost/world"
)

// Timers (docs/contract.md section 11). Beside the producers, a setter
// sets timers for random ids of the run, about eight a second, each with
// a key of its own as timer key and body: most due 0.1 to 1.5 s ahead,
// every fourth 2.5 to 3.5 s ahead and cancelled 0.3 to 0.7 s after it was
// set (at least cancelLead before its time, so that a cancel that removed
// it means it never fires); none due after the load stops. The owners report the mailbox stream's timestamp
// of each message they deliver, which the checker compares with the
// timer's time: the broker's clock against the time the broker was given.

// Timer outcomes, as TimerRecord.Outcome.
const (
	TimerScheduled = "scheduled" // stored in the timer stream
	TimerUnknown   = "unknown"   // the send's outcome is unknown
	TimerRefused   = "refused"   // refused: nothing stored
)

// Cancel outcomes, as TimerRecord.Cancel.
const (
	CancelRemoved = "cancelled" // the timer was pending and is removed
	CancelNone    = "none"      // no pending timer had that key
	CancelUnknown = "unknown"   // the cancel's outcome is unknown
)

// cancelLead is how long before its time, at least, a timer is cancelled.
const cancelLead = time.Second

// TimerRecord is one timer the setter set.
type TimerRecord struct {
	ID       string    `json:"id"`
	Key      string    `json:"key"` // its timer key and body
	At       time.Time `json:"at"`  // its time
	Outcome  string    `json:"outcome"`
	Invoked  time.Time `json:"invoked"`
	Returned time.Time `json:"returned"`
	// Cancel is how its cancel ended ("": none was made).
	Cancel         string    `json:"cancel,omitempty"`
	CancelInvoked  time.Time `json:"cancel_invoked,omitzero"`
	CancelReturned time.Time `json:"cancel_returned,omitzero"`
}

// cancelledInTime says whether t was removed by a cancel that returned
// before its time (verify's clock): then it never fires.
func (t TimerRecord) cancelledInTime() bool {
	return t.Cancel == CancelRemoved && t.CancelReturned.Before(t.At)
}

// mustFire says whether t must enter its mailbox: it was stored and no
// cancel removed it or may have.
func (t TimerRecord) mustFire() bool {
	return t.Outcome == TimerScheduled && t.Cancel != CancelRemoved && t.Cancel != CancelUnknown
}

// setTimers sets timers until ctx ends; the cancels it starts are in wg.
func (r *run) setTimers(ctx context.Context, w *client.World, wg *sync.WaitGroup) {
	for n := 1; ; n++ {
		if !sleepCtx(ctx, time.Duration(80+rand.IntN(80))*time.Millisecond) {
			return
		}
		id := r.ids[rand.IntN(len(r.ids))]
		key := fmt.Sprintf("t-%d", n)
		cancel := n%4 == 0
		d := time.Duration(100+rand.IntN(1400)) * time.Millisecond
		if cancel {
			d = time.Duration(2500+rand.IntN(1000)) * time.Millisecond
		}
		t := TimerRecord{ID: id, Key: key, At: time.Now().Add(d).Round(0), Invoked: time.Now()}
		if end := r.loadEnd.Load(); end != 0 && t.At.UnixNano() > end {
			continue // none due after the load stops: the run ends no later for them
		}
		r.ct.addTimer(t)
		sctx, stop := context.WithTimeout(context.Background(), 3*time.Second)
		_, err := w.Queue.Send(sctx, id, []byte(key), queue.WithAt(t.At), queue.WithTimerKey(key))
		stop()
		switch {
		case err == nil:
			t.Outcome = TimerScheduled
		case errors.Is(err, queue.ErrUnknown):
			t.Outcome = TimerUnknown
		default:
			t.Outcome = TimerRefused
		}
		t.Returned = time.Now()
		r.ct.setTimer(t)
		if errors.Is(err, world.ErrNoTimers) || errors.Is(err, client.ErrNotPermitted) {
			r.cfg.Log.Warn("verify: no timers: the world or the user takes none", "error", err)
			return
		}
		if cancel && t.Outcome != TimerRefused {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r.cancelTimer(ctx, w, t)
			}()
		}
	}
}

// cancelTimer cancels t a moment after it was set (also when the load
// stops meanwhile: else it would fire late), unless its time is less than
// cancelLead away.
func (r *run) cancelTimer(ctx context.Context, w *client.World, t TimerRecord) {
	sleepCtx(ctx, time.Duration(300+rand.IntN(400))*time.Millisecond)
	if time.Until(t.At) < cancelLead {
		return
	}
	t.CancelInvoked = time.Now()
	cctx, stop := context.WithTimeout(context.Background(), 2*time.Second)
	removed, err := w.Timers.Cancel(cctx, t.ID, t.Key)
	stop()
	t.CancelReturned = time.Now()
	switch {
	case err != nil:
		t.Cancel = CancelUnknown
	case removed:
		t.Cancel = CancelRemoved
	default:
		t.Cancel = CancelNone
	}
	r.ct.setTimer(t)
}

// ctLog records the calls and timers of a run, and the mailbox stream's
// timestamp of every delivered timer; it is safe for concurrent use.
type ctLog struct {
	mu        sync.Mutex
	calls     []CallRecord
	timers    []TimerRecord
	byKey     map[string]int       // timers by key
	stored    map[uint64]time.Time // a delivered timer's mailbox timestamp, by mailbox sequence
	delivered map[string]bool      // timer keys delivered
}

func newCTLog() *ctLog {
	return &ctLog{byKey: map[string]int{}, stored: map[uint64]time.Time{}, delivered: map[string]bool{}}
}

func (l *ctLog) addCall(c CallRecord) {
	l.mu.Lock()
	l.calls = append(l.calls, c)
	l.mu.Unlock()
}

// addTimer records a timer before it is set: its deliveries may come
// before the send returns.
func (l *ctLog) addTimer(t TimerRecord) {
	l.mu.Lock()
	l.byKey[t.Key] = len(l.timers)
	l.timers = append(l.timers, t)
	l.mu.Unlock()
}

// setTimer records what became of a timer addTimer recorded.
func (l *ctLog) setTimer(t TimerRecord) {
	l.mu.Lock()
	if i, ok := l.byKey[t.Key]; ok {
		l.timers[i] = t
	}
	l.mu.Unlock()
}

// delivered notes a delivery of key at mailbox sequence seq, stored at
// posted (the mailbox stream's timestamp): kept when it is a timer's.
func (l *ctLog) deliver(key string, seq uint64, posted time.Time) {
	l.mu.Lock()
	if _, ok := l.byKey[key]; ok {
		l.delivered[key] = true
		if !posted.IsZero() {
			l.stored[seq] = posted
		}
	}
	l.mu.Unlock()
}

// waiting is the number of timers that must still enter their mailbox
// (TimerRecord.mustFire) and were not delivered yet.
func (l *ctLog) waiting() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, t := range l.timers {
		if t.mustFire() && !l.delivered[t.Key] {
			n++
		}
	}
	return n
}

// snapshot is a copy of what was recorded.
func (l *ctLog) snapshot() ([]CallRecord, []TimerRecord, map[uint64]time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	stored := make(map[uint64]time.Time, len(l.stored))
	for k, v := range l.stored {
		stored[k] = v
	}
	return append([]CallRecord(nil), l.calls...), append([]TimerRecord(nil), l.timers...), stored
}
