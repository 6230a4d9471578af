package verify

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/testkit/history"
)

// Meta says what run a history is of.
type Meta struct {
	World           string        `json:"world"`
	Replicas        int           `json:"replicas"`
	Partitions      int           `json:"partitions,omitempty"` // the scratch world's (world.PartitionsFor)
	Shards          int           `json:"shards,omitempty"`     // the scratch world's shards (0: a per-id world)
	Started         time.Time     `json:"started"`
	Elapsed         time.Duration `json:"elapsed_ns"`
	Duration        time.Duration `json:"duration_ns"`
	IDs             int           `json:"ids"`
	Owners          int           `json:"owners"`
	TTL             time.Duration `json:"ttl_ns"`
	Faults          []string      `json:"faults"`
	Drained         bool          `json:"drained"`             // the final drain emptied every mailbox
	FollowerCurrent bool          `json:"follower_current"`    // the bucket stream was read to its end
	DeadRead        bool          `json:"dead_read,omitempty"` // the dead letters were read after the final drain (Recorded.Dead)
}

// FaultEvent is one injected fault.
type FaultEvent struct {
	At    time.Time `json:"at"`
	Kind  string    `json:"kind"`
	Node  string    `json:"node,omitempty"`  // the owner hit (kill, stop), or the holder seized
	ID    string    `json:"id,omitempty"`    // the id seized
	Epoch uint64    `json:"epoch,omitempty"` // the operator's epoch of a seize
	Note  string    `json:"note,omitempty"`
}

// Recorded is what a run recorded: the history the checker reads and the
// figures around it.
type Recorded struct {
	Meta     Meta
	History  history.History
	Unfenced []CursorWrite // cursor writes that carried no fence of their id's record
	// Pending are the exceptions of the shard cursors a sharded world's
	// commits wrote, by the commit's bucket sequence (only those with any:
	// a commit's Cursor is its shard cursor's mark).
	Pending     map[uint64]map[string]wire.PendingID
	Coverage    Coverage
	FaultEvents []FaultEvent
	OwnerStarts int64
	OwnerExits  map[string]int // by cause
	OwnerErrors []string
	// UnknownSends counts send attempts whose outcome was unknown (each
	// retried with the same message id).
	UnknownSends int64
	Calls        []CallRecord  // the callers' calls (calls.go)
	Timers       []TimerRecord // the timers set (timers.go)
	// Stored is the mailbox stream's timestamp of each delivered timer's
	// message, by its mailbox sequence (the broker's clock).
	Stored map[uint64]time.Time
	Dead   []DeadLetter // the world's dead letters after the final drain (Meta.DeadRead)
}

// One line of a history file: "t" says which kind, the other fields are
// the kind's.
type (
	lineMeta struct {
		T string `json:"t"`
		Meta
		Coverage     Coverage       `json:"coverage"`
		OwnerStarts  int64          `json:"owner_starts"`
		OwnerExits   map[string]int `json:"owner_exits"`
		UnknownSends int64          `json:"unknown_sends"`
	}
	lineSend struct {
		T        string    `json:"t"`
		Producer string    `json:"producer"`
		ID       string    `json:"id"`
		Key      string    `json:"key"`
		Outcome  string    `json:"outcome"`
		Seq      uint64    `json:"seq,omitempty"`
		Invoked  time.Time `json:"invoked"`
		Returned time.Time `json:"returned"`
	}
	lineDelivery struct {
		T        string    `json:"t"`
		ID       string    `json:"id"`
		Key      string    `json:"key"`
		Seq      uint64    `json:"seq"`
		Node     string    `json:"node"`
		Epoch    uint64    `json:"epoch"`
		Revision uint64    `json:"revision"`
		At       time.Time `json:"at"`
		Posted   time.Time `json:"posted,omitzero"` // a timer's: the mailbox stream's timestamp
	}
	lineCommit struct {
		T         string                    `json:"t"`
		ID        string                    `json:"id"`
		Node      string                    `json:"node"`
		Epoch     uint64                    `json:"epoch"`
		Revision  uint64                    `json:"revision"`
		Cursor    uint64                    `json:"cursor"`
		StreamSeq uint64                    `json:"bucket_seq"`
		At        time.Time                 `json:"at"`
		Pending   map[string]wire.PendingID `json:"pending,omitempty"` // a shard cursor's exceptions
	}
	lineUnfenced struct {
		T string `json:"t"`
		CursorWrite
	}
	lineOp struct {
		T        string        `json:"t"`
		Kind     string        `json:"kind"`
		ID       string        `json:"id"`
		Node     string        `json:"node"`
		TTL      time.Duration `json:"ttl_ns"`
		Call     int64         `json:"call_ns"`
		Return   int64         `json:"return_ns"`
		Res      string        `json:"result"`
		Holder   string        `json:"holder,omitempty"`
		Epoch    uint64        `json:"epoch,omitempty"`
		Expires  int64         `json:"expires_ns,omitempty"`
		Revision uint64        `json:"revision,omitempty"`
	}
	lineFault struct {
		T string `json:"t"`
		FaultEvent
	}
	lineCall struct {
		T string `json:"t"`
		CallRecord
	}
	lineTimer struct {
		T string `json:"t"`
		TimerRecord
	}
	lineDead struct {
		T string `json:"t"`
		DeadLetter
	}
)

// WriteHistory writes rec as JSON lines: one "meta" line, then one line
// per "send", "delivery", "commit", "unfenced" cursor write, ownership
// "op", "fault", "call", "timer" and "dead" letter (docs/reliability.md
// describes the fields).
func WriteHistory(w io.Writer, rec *Recorded) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	put := func(v any) {
		_ = enc.Encode(v) // the error, if any, is bw's: Flush returns it
	}
	put(lineMeta{T: "meta", Meta: rec.Meta, Coverage: rec.Coverage, OwnerStarts: rec.OwnerStarts, OwnerExits: rec.OwnerExits, UnknownSends: rec.UnknownSends})
	h := rec.History
	for _, s := range h.Sends {
		put(lineSend{"send", s.Producer, s.ID, s.Key, s.Outcome.String(), s.Seq, s.Invoked, s.Returned})
	}
	for _, d := range h.Deliveries {
		put(lineDelivery{"delivery", d.ID, d.Key, d.Seq, d.Node, d.Epoch, d.Revision, d.At, rec.Stored[d.Seq]})
	}
	for _, c := range h.Commits {
		put(lineCommit{"commit", c.ID, c.Node, c.Epoch, c.Revision, c.Cursor, c.StreamSeq, c.At, rec.Pending[c.StreamSeq]})
	}
	for _, u := range rec.Unfenced {
		put(lineUnfenced{"unfenced", u})
	}
	for _, op := range h.Ops {
		put(lineOp{"op", op.In.Kind.String(), op.In.ID, op.In.Node, op.In.TTL, op.In.Call, op.In.Return,
			op.Out.Res.String(), op.Out.Node, op.Out.Epoch, op.Out.Expires, op.Out.Revision})
	}
	for _, f := range rec.FaultEvents {
		put(lineFault{"fault", f})
	}
	for _, c := range rec.Calls {
		put(lineCall{"call", c})
	}
	for _, t := range rec.Timers {
		put(lineTimer{"timer", t})
	}
	for _, d := range rec.Dead {
		put(lineDead{"dead", d})
	}
	return bw.Flush()
}

// ReadHistory reads a history file written by WriteHistory.
func ReadHistory(r io.Reader) (*Recorded, error) {
	rec := &Recorded{}
	hr := history.NewRecorder() // the sends through it: it numbers each producer's sends
	type sendTimes struct{ invoked, returned time.Time }
	var times []sendTimes
	var ops []history.OwnOp
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Bytes()
		var probe struct {
			T string `json:"t"`
		}
		if err := json.Unmarshal(line, &probe); err != nil {
			return nil, fmt.Errorf("verify: history line %d: %w", n, err)
		}
		var err error
		switch probe.T {
		case "meta":
			var m lineMeta
			if err = json.Unmarshal(line, &m); err == nil {
				rec.Meta, rec.Coverage, rec.OwnerStarts, rec.OwnerExits, rec.UnknownSends = m.Meta, m.Coverage, m.OwnerStarts, m.OwnerExits, m.UnknownSends
			}
		case "send":
			var s lineSend
			if err = json.Unmarshal(line, &s); err == nil {
				var o history.Outcome
				if o, err = outcomeOf(s.Outcome); err == nil {
					hr.SendDone(hr.SendInvoked(s.Producer, s.ID, s.Key), o, s.Seq)
					times = append(times, sendTimes{s.Invoked, s.Returned})
				}
			}
		case "delivery":
			var d lineDelivery
			if err = json.Unmarshal(line, &d); err == nil {
				hr.Deliver(history.Delivery{ID: d.ID, Key: d.Key, Seq: d.Seq, Node: d.Node, Epoch: d.Epoch, Revision: d.Revision, At: d.At})
				if !d.Posted.IsZero() {
					if rec.Stored == nil {
						rec.Stored = map[uint64]time.Time{}
					}
					rec.Stored[d.Seq] = d.Posted
				}
			}
		case "commit":
			var c lineCommit
			if err = json.Unmarshal(line, &c); err == nil {
				hr.Commit(history.Commit{ID: c.ID, Node: c.Node, Epoch: c.Epoch, Revision: c.Revision, Cursor: c.Cursor, StreamSeq: c.StreamSeq, At: c.At})
				if len(c.Pending) > 0 {
					if rec.Pending == nil {
						rec.Pending = map[uint64]map[string]wire.PendingID{}
					}
					rec.Pending[c.StreamSeq] = c.Pending
				}
			}
		case "unfenced":
			var u lineUnfenced
			if err = json.Unmarshal(line, &u); err == nil {
				rec.Unfenced = append(rec.Unfenced, u.CursorWrite)
			}
		case "op":
			var o lineOp
			if err = json.Unmarshal(line, &o); err == nil {
				var op history.OwnOp
				if op, err = opOf(o); err == nil {
					ops = append(ops, op)
				}
			}
		case "fault":
			var f lineFault
			if err = json.Unmarshal(line, &f); err == nil {
				rec.FaultEvents = append(rec.FaultEvents, f.FaultEvent)
			}
		case "call":
			var c lineCall
			if err = json.Unmarshal(line, &c); err == nil {
				rec.Calls = append(rec.Calls, c.CallRecord)
			}
		case "timer":
			var t lineTimer
			if err = json.Unmarshal(line, &t); err == nil {
				rec.Timers = append(rec.Timers, t.TimerRecord)
			}
		case "dead":
			var d lineDead
			if err = json.Unmarshal(line, &d); err == nil {
				rec.Dead = append(rec.Dead, d.DeadLetter)
			}
		default:
			err = fmt.Errorf("unknown kind %q", probe.T)
		}
		if err != nil {
			return nil, fmt.Errorf("verify: history line %d: %w", n, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("verify: read history: %w", err)
	}
	rec.History = hr.History()
	for i := range rec.History.Sends {
		rec.History.Sends[i].Invoked, rec.History.Sends[i].Returned = times[i].invoked, times[i].returned
	}
	rec.History.Ops = ops
	return rec, nil
}

func outcomeOf(s string) (history.Outcome, error) {
	for o := history.Invoked; o <= history.Unknown; o++ {
		if o.String() == s {
			return o, nil
		}
	}
	return 0, fmt.Errorf("unknown send outcome %q", s)
}

func opOf(o lineOp) (history.OwnOp, error) {
	op := history.OwnOp{
		In:  history.OwnInput{ID: o.ID, Node: o.Node, TTL: o.TTL, Call: o.Call, Return: o.Return},
		Out: history.OwnOutput{Node: o.Holder, Epoch: o.Epoch, Expires: o.Expires, Revision: o.Revision},
	}
	kind, res := false, false
	for k := history.OpClaim; k <= history.OpOwner; k++ {
		if k.String() == o.Kind {
			op.In.Kind, kind = k, true
		}
	}
	for r := history.ResClaimed; r <= history.ResUnknown; r++ {
		if r.String() == o.Res {
			op.Out.Res, res = r, true
		}
	}
	if !kind || !res {
		return op, fmt.Errorf("unknown operation %q or result %q", o.Kind, o.Res)
	}
	return op, nil
}
