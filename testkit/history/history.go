// Package history records what a fault test did to fencepost (every send,
// delivery and commit, and every ownership operation with its call and
// return times) and checks the record against the invariants of
// docs/contract.md section 3 once a final full drain has run:
//
//   - lost: a send acknowledged as posted whose message no handler ever
//     received (a send whose outcome is unknown may or may not be
//     delivered, and counts neither way);
//   - unexpected: a delivery of a message that was never sent, that was
//     refused, or that arrived under another sequence than the one its
//     send was acknowledged with;
//   - stale commit and stale delivery (see Check for the exact rules);
//   - order: per id and producer, the first deliveries of the messages
//     that producer posted one after the other (each send returned before
//     the next was invoked) come in posting order;
//   - cursor back: per id, stored cursors never move backwards;
//   - duplicates: deliveries beyond the first of a message, as a figure.
//
// The ownership operations are checked for linearizability separately
// (CheckOwnership, a porcupine model of the record).
package history

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// Outcome is how a send ended.
type Outcome int

// Send outcomes.
const (
	Invoked Outcome = iota // no answer yet
	Posted                 // acknowledged by the stream
	Refused                // refused by the server: nothing was stored
	Unknown                // no answer: it may or may not have been stored
)

func (o Outcome) String() string {
	return [...]string{"invoked", "posted", "refused", "unknown"}[o]
}

// Send is one message a producer sent. Key identifies the message (it is
// its body and its message id) and is unique in a history.
type Send struct {
	Producer string
	ID       string
	Key      string
	Outcome  Outcome
	Seq      uint64 // the acknowledged stream sequence (Posted only)
	Invoked  time.Time
	Returned time.Time
	n        int // the producer's n-th send
}

// Delivery is one call of a handler. At is the wall clock taken when the
// handler was entered, in the process that ran it (all processes of a test
// run on one machine and share the clock).
type Delivery struct {
	ID       string
	Key      string
	Seq      uint64
	Node     string
	Epoch    uint64
	Revision uint64 // the fence's record revision
	At       time.Time
}

// Commit is a cursor write the broker acknowledged. StreamSeq is its
// sequence in the bucket stream, which orders it against every other write
// of the bucket (records included); At is the wall clock after the ack.
type Commit struct {
	ID        string
	Node      string
	Epoch     uint64
	Revision  uint64
	Cursor    uint64
	StreamSeq uint64
	At        time.Time
}

// Recorder collects a history; it is safe for concurrent use.
type Recorder struct {
	mu         sync.Mutex
	sends      []Send
	byProducer map[string]int
	deliveries []Delivery
	commits    []Commit
	ops        []OwnOp
	delivered  map[string]bool // keys delivered
	lastNode   map[string]string
	pending    map[string]bool // keys posted and not delivered yet
}

// NewRecorder returns an empty recorder.
func NewRecorder() *Recorder {
	return &Recorder{byProducer: map[string]int{}, delivered: map[string]bool{}, pending: map[string]bool{}, lastNode: map[string]string{}}
}

// SendInvoked records the start of a send and returns its handle for
// SendDone.
func (r *Recorder) SendInvoked(producer, id, key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.byProducer[producer]++
	r.sends = append(r.sends, Send{Producer: producer, ID: id, Key: key, Invoked: time.Now(), n: r.byProducer[producer]})
	return len(r.sends) - 1
}

// SendDone records how send h ended.
func (r *Recorder) SendDone(h int, o Outcome, seq uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sends[h].Outcome, r.sends[h].Seq, r.sends[h].Returned = o, seq, time.Now()
	if k := r.sends[h].Key; o == Posted && !r.delivered[k] {
		r.pending[k] = true
	}
}

// Deliver records a delivery.
func (r *Recorder) Deliver(d Delivery) {
	r.mu.Lock()
	r.deliveries = append(r.deliveries, d)
	r.delivered[d.Key] = true
	r.lastNode[d.ID] = d.Node
	delete(r.pending, d.Key)
	r.mu.Unlock()
}

// Commit records a stored commit.
func (r *Recorder) Commit(c Commit) {
	r.mu.Lock()
	r.commits = append(r.commits, c)
	r.mu.Unlock()
}

// Counts are the sends, the posted sends and the deliveries so far.
func (r *Recorder) Counts() (sends, posted, deliveries int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.sends {
		if s.Outcome == Posted {
			posted++
		}
	}
	return len(r.sends), posted, len(r.deliveries)
}

// Holders are the nodes that made the last delivery of some id, with the
// number of such ids.
func (r *Recorder) Holders() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for _, n := range r.lastNode {
		out[n]++
	}
	return out
}

// Undelivered is the number of posted sends not delivered yet (the final
// drain waits for it to reach 0).
func (r *Recorder) Undelivered() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pending)
}

// History is a copy of what was recorded.
type History struct {
	Sends      []Send
	Deliveries []Delivery
	Commits    []Commit
	Ops        []OwnOp
}

// History returns a copy of the recorded history.
func (r *Recorder) History() History {
	r.mu.Lock()
	defer r.mu.Unlock()
	return History{slices.Clone(r.sends), slices.Clone(r.deliveries), slices.Clone(r.commits), slices.Clone(r.ops)}
}

// Report is the outcome of Check. Each violation list holds at most
// maxExamples descriptions; the counts are complete.
type Report struct {
	Sends, Posted, Refused, Unknown  int
	Deliveries, Distinct, Duplicates int
	Commits                          int
	Takeovers                        int // per id, epochs seen after the first

	Lost, Unexpected, StaleDeliveries, StaleCommits, Order, CursorBack int
	// StoredTwice counts keys stored under two sequences: a send of
	// unknown outcome retried with the same message id, and not
	// deduplicated. Reported, not a violation of the checks above (see
	// docs/reliability.md, Found).
	StoredTwice int
	Examples    []string
	Violations  []Violation // Violations[i] is what Examples[i] is about
}

// Violation is what an example is about: its kind (the example's prefix:
// "lost", "unexpected", "stored twice", "order", "cursor back", "stale
// commit", "stale delivery"), the id, the message's sequence (a commit's
// cursor) and when it happened: the handler's entry, the commit's ack,
// or for an order of sequences the send's return (zero for a lost
// message).
type Violation struct {
	Kind string
	ID   string
	Seq  uint64
	At   time.Time
}

const maxExamples = 20

func (rep *Report) violation(count *int, v Violation, format string, args ...any) {
	*count++
	rep.Examples, rep.Violations = addExample(rep.Examples, rep.Violations, fmt.Sprintf(format, args...), v)
}

// addExample adds an example of v (text) to ex and vs, at most
// maxExamples of them. A violation takes the place of the last example of
// a key stored twice (a figure, not a violation) when they are full, so
// that a run's violations are never crowded out of its examples.
func addExample(ex []string, vs []Violation, text string, v Violation) ([]string, []Violation) {
	if len(ex) >= maxExamples {
		if v.Kind == "stored twice" {
			return ex, vs
		}
		i := len(vs) - 1
		for i >= 0 && vs[i].Kind != "stored twice" {
			i--
		}
		if i < 0 {
			return ex, vs
		}
		ex, vs = slices.Delete(ex, i, i+1), slices.Delete(vs, i, i+1)
	}
	return append(ex, text), append(vs, v)
}

func (rep *Report) example(v Violation, format string, args ...any) {
	if len(rep.Examples) < maxExamples {
		rep.Examples = append(rep.Examples, fmt.Sprintf(format, args...))
		rep.Violations = append(rep.Violations, v)
	}
}

// OK says whether no invariant was violated.
func (rep Report) OK() bool {
	return rep.Lost+rep.Unexpected+rep.StaleDeliveries+rep.StaleCommits+rep.Order+rep.CursorBack == 0
}

// DuplicatePct is the duplicates as a percentage of the distinct messages
// delivered.
func (rep Report) DuplicatePct() float64 {
	if rep.Distinct == 0 {
		return 0
	}
	return 100 * float64(rep.Duplicates) / float64(rep.Distinct)
}

func (rep Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "sends=%d posted=%d refused=%d unknown=%d deliveries=%d distinct=%d duplicates=%d (%.3f%%) commits=%d takeovers=%d | lost=%d unexpected=%d stale_deliveries=%d stale_commits=%d order=%d cursor_back=%d | stored_twice=%d",
		rep.Sends, rep.Posted, rep.Refused, rep.Unknown, rep.Deliveries, rep.Distinct, rep.Duplicates, rep.DuplicatePct(), rep.Commits, rep.Takeovers,
		rep.Lost, rep.Unexpected, rep.StaleDeliveries, rep.StaleCommits, rep.Order, rep.CursorBack, rep.StoredTwice)
	for _, e := range rep.Examples {
		b.WriteString("\n  " + e)
	}
	return b.String()
}

// Check checks a history recorded up to and including a final full drain
// (every posted message had its chance to be delivered).
//
// Stale epochs, precisely. Epoch e of an id is superseded once the
// ownership record of that id named an epoch e' > e. Two kinds of events
// prove that, each with a point in an order:
//
//   - in the bucket stream's order (no clock): a stored commit under e' at
//     bucket sequence s proves the record named e' before s; a delivery
//     under e' with fence revision F proves the record named e' at revision
//     F, so at every bucket sequence after F. A commit under e stored at a
//     bucket sequence after such a point is a stale commit: the broker
//     accepted a cursor write whose expected record revision named e after
//     the record had moved on to e' (epochs never go back, so the record
//     cannot have named e again). This is the fenced commit of invariant 5,
//     checked without any clock.
//   - in wall-clock time (one machine, one clock for every process): a
//     handler entered under e' at time t, or a commit under e' acknowledged
//     at time t, proves e was superseded by t. A delivery under e whose
//     handler was entered after t is a stale delivery: a drain handed a
//     message to a holder after a newer holder had already started
//     (invariant 4 together with the self-fence of docs/contract.md section 5: a
//     holder stops acting before anyone can take over).
func Check(h History) Report {
	var rep Report
	sends := map[string]*Send{}
	for i := range h.Sends {
		s := &h.Sends[i]
		sends[s.Key] = s
		rep.Sends++
		switch s.Outcome {
		case Posted:
			rep.Posted++
		case Refused:
			rep.Refused++
		case Unknown, Invoked:
			rep.Unknown++
		}
	}

	// First delivery of each key; unexpected deliveries.
	type first struct {
		at  time.Time
		idx int
	}
	firsts := map[string]first{}
	twice := map[string]bool{}
	epochs := map[string]map[uint64]bool{}
	for i, d := range h.Deliveries {
		rep.Deliveries++
		if epochs[d.ID] == nil {
			epochs[d.ID] = map[uint64]bool{}
		}
		epochs[d.ID][d.Epoch] = true
		s, ok := sends[d.Key]
		switch {
		case !ok:
			rep.violation(&rep.Unexpected, Violation{"unexpected", d.ID, d.Seq, d.At}, "unexpected: %s key %q seq %d delivered to %s/%d but never sent", d.ID, d.Key, d.Seq, d.Node, d.Epoch)
		case s.ID != d.ID:
			rep.violation(&rep.Unexpected, Violation{"unexpected", d.ID, d.Seq, d.At}, "unexpected: key %q sent to %s delivered from %s", d.Key, s.ID, d.ID)
		case s.Outcome == Refused:
			rep.violation(&rep.Unexpected, Violation{"unexpected", d.ID, d.Seq, d.At}, "unexpected: %s key %q delivered (seq %d) but its send was refused", d.ID, d.Key, d.Seq)
		case s.Outcome == Posted && s.Seq != d.Seq:
			// The key is stored under two sequences: an attempt of
			// unknown outcome stored one copy and the retry, with the
			// same message id, another one that the dedupe window
			// should have refused. Sent, so not unexpected; not a
			// duplicate delivery of one message either.
			if !twice[d.Key] {
				twice[d.Key] = true
				rep.StoredTwice++
				rep.example(Violation{"stored twice", d.ID, d.Seq, d.At}, "stored twice: %s key %q posted at seq %d (after a retry) also delivered as seq %d", d.ID, d.Key, s.Seq, d.Seq)
			}
		}
		if f, ok := firsts[d.Key]; !ok || d.At.Before(f.at) {
			firsts[d.Key] = first{d.At, i}
		}
	}
	rep.Distinct = len(firsts)
	rep.Duplicates = rep.Deliveries - rep.Distinct
	for _, es := range epochs {
		rep.Takeovers += len(es) - 1
	}

	// Lost.
	for i := range h.Sends {
		s := &h.Sends[i]
		if s.Outcome == Posted {
			if _, ok := firsts[s.Key]; !ok {
				rep.violation(&rep.Lost, Violation{"lost", s.ID, s.Seq, time.Time{}}, "lost: %s key %q posted at seq %d by %s, never delivered", s.ID, s.Key, s.Seq, s.Producer)
			}
		}
	}

	// Order: per (id, producer), posted sends in invocation order; each one
	// returned before the next was invoked.
	chains := map[[2]string][]*Send{}
	for i := range h.Sends {
		s := &h.Sends[i]
		if s.Outcome == Posted {
			k := [2]string{s.ID, s.Producer}
			chains[k] = append(chains[k], s)
		}
	}
	for _, ch := range chains {
		sort.Slice(ch, func(i, j int) bool { return ch[i].n < ch[j].n })
		var prev *Send
		var prevAt time.Time
		for _, s := range ch {
			f, ok := firsts[s.Key]
			if !ok {
				continue // lost, reported above
			}
			if prev != nil {
				if s.Seq <= prev.Seq {
					rep.violation(&rep.Order, Violation{"order", s.ID, s.Seq, s.Returned}, "order: %s: %q posted after %q got seq %d <= %d", s.ID, s.Key, prev.Key, s.Seq, prev.Seq)
				}
				if f.at.Before(prevAt) {
					rep.violation(&rep.Order, Violation{"order", s.ID, s.Seq, f.at}, "order: %s: %q (seq %d) first delivered at %s, before %q (seq %d) posted earlier, at %s",
						s.ID, s.Key, s.Seq, f.at.Format(time.RFC3339Nano), prev.Key, prev.Seq, prevAt.Format(time.RFC3339Nano))
				}
			}
			prev, prevAt = s, f.at
		}
	}

	// Stale commits, in bucket order; cursors never go back. Per id and
	// epoch: the lowest bucket sequence at which the record is proven to
	// have named a higher epoch, and the earliest time a higher epoch acted.
	seqOf := map[string]map[uint64]uint64{}
	atOf := map[string]map[uint64]time.Time{}
	prove := func(id string, epoch, seq uint64, at time.Time) {
		if seqOf[id] == nil {
			seqOf[id], atOf[id] = map[uint64]uint64{}, map[uint64]time.Time{}
		}
		if old, ok := seqOf[id][epoch]; !ok || seq < old {
			seqOf[id][epoch] = seq
		}
		if old, ok := atOf[id][epoch]; !ok || at.Before(old) {
			atOf[id][epoch] = at
		}
	}
	for _, d := range h.Deliveries {
		prove(d.ID, d.Epoch, d.Revision, d.At)
	}
	commits := map[string][]Commit{}
	for _, c := range h.Commits {
		rep.Commits++
		commits[c.ID] = append(commits[c.ID], c)
		prove(c.ID, c.Epoch, c.StreamSeq, c.At)
	}
	type higher struct {
		epoch uint64
		seq   uint64
		at    time.Time
		atEp  uint64
	}
	// above[id][e]: the earliest proof of an epoch above e.
	above := map[string]map[uint64]higher{}
	for id, m := range seqOf {
		eps := make([]uint64, 0, len(m))
		for e := range m {
			eps = append(eps, e)
		}
		sort.Slice(eps, func(i, j int) bool { return eps[i] > eps[j] })
		above[id] = map[uint64]higher{}
		var run higher
		found := false
		for _, e := range eps {
			if found {
				above[id][e] = run
			}
			if !found || m[e] < run.seq {
				run.epoch, run.seq = e, m[e]
			}
			if !found || atOf[id][e].Before(run.at) {
				run.atEp, run.at = e, atOf[id][e]
			}
			found = true
		}
	}
	for id, cs := range commits {
		sort.Slice(cs, func(i, j int) bool { return cs[i].StreamSeq < cs[j].StreamSeq })
		for i, c := range cs {
			if i > 0 && c.Cursor < cs[i-1].Cursor {
				rep.violation(&rep.CursorBack, Violation{"cursor back", id, c.Cursor, c.At}, "cursor back: %s: cursor %d (%s/%d at bucket seq %d) after cursor %d (%s/%d at bucket seq %d)",
					id, c.Cursor, c.Node, c.Epoch, c.StreamSeq, cs[i-1].Cursor, cs[i-1].Node, cs[i-1].Epoch, cs[i-1].StreamSeq)
			}
			if p, ok := above[id][c.Epoch]; ok && p.seq < c.StreamSeq {
				rep.violation(&rep.StaleCommits, Violation{"stale commit", id, c.Cursor, c.At}, "stale commit: %s: %s/%d stored cursor %d at bucket seq %d, after the record named epoch %d (at bucket seq %d)",
					id, c.Node, c.Epoch, c.Cursor, c.StreamSeq, p.epoch, p.seq)
			}
		}
	}
	// Stale deliveries, in time.
	for _, d := range h.Deliveries {
		if p, ok := above[d.ID][d.Epoch]; ok && p.at.Before(d.At) {
			rep.violation(&rep.StaleDeliveries, Violation{"stale delivery", d.ID, d.Seq, d.At}, "stale delivery: %s seq %d to %s/%d at %s, after epoch %d had acted at %s",
				d.ID, d.Seq, d.Node, d.Epoch, d.At.Format(time.RFC3339Nano), p.atEp, p.at.Format(time.RFC3339Nano))
		}
	}
	return rep
}
