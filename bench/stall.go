package bench

import (
	"slices"
	"sync"
	"time"
)

// stallWindow is how long after a stream leader's kill deliveries are
// watched for the stall it causes.
const stallWindow = 10 * time.Second

// LeaderKill is a stream leader killed mid-run (Config.KillLeaders) and
// the stall it caused on its side.
type LeaderKill struct {
	Side   string  `json:"side"`   // "fencepost" or "raw"
	Stream string  `json:"stream"` // fencepost: "mailbox" or "bucket"; raw: "raw"
	Node   string  `json:"node"`   // the member killed
	AtS    float64 `json:"at_s"`   // seconds since the run's start
	// FirstDeliveryMs runs from the kill to the first delivery handled
	// after it (-1: none in the window). Deliveries already in a handler's
	// hands may come first, so StallMs is the better measure.
	FirstDeliveryMs float64 `json:"first_delivery_ms"`
	// StallMs is the longest pause between the kill and the deliveries
	// after it, in the stallWindow that follows the kill (the whole window
	// if nothing was delivered in it; the pause after the last delivery in
	// the window is not counted, posting may have ended).
	StallMs float64 `json:"stall_ms"`
}

// stallMeter keeps the delivery times in the window after each kill.
type stallMeter struct {
	mu    sync.Mutex
	kills []*killWindow
}

type killWindow struct {
	LeaderKill
	at   int64   // unix nanos of the kill
	seen []int64 // delivery times in [at, at+stallWindow]
}

// killed opens a window at k.
func (m *stallMeter) killed(side string, start time.Time, k leaderKill) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.kills = append(m.kills, &killWindow{
		LeaderKill: LeaderKill{Side: side, Stream: k.what, Node: k.node, AtS: round(k.at.Sub(start).Seconds(), 3)},
		at:         k.at.UnixNano(),
	})
}

// saw records a delivery handled at at (unix nanos).
func (m *stallMeter) saw(at int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, w := range m.kills {
		if at >= w.at && at <= w.at+int64(stallWindow) {
			w.seen = append(w.seen, at)
		}
	}
}

// result is every window's stall. Deliveries reach the meter out of time
// order (several processes report them), so each window is sorted first.
func (m *stallMeter) result() []LeaderKill {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []LeaderKill
	for _, w := range m.kills {
		k := w.LeaderKill
		k.FirstDeliveryMs, k.StallMs = stall(w.at, w.seen)
		out = append(out, k)
	}
	return out
}

// stall is the first delivery after at and the longest pause from at
// through the deliveries seen, in ms.
func stall(at int64, seen []int64) (first, longest float64) {
	ms := func(ns int64) float64 { return round(float64(ns)/1e6, 1) }
	if len(seen) == 0 {
		return -1, ms(int64(stallWindow))
	}
	slices.Sort(seen)
	last, gap := at, int64(0)
	for _, t := range seen {
		gap = max(gap, t-last)
		last = t
	}
	return ms(seen[0] - at), ms(gap)
}
