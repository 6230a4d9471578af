package history

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/fencepost/fencepost/ownership"
)

// OpKind is an ownership operation.
type OpKind int

// Ownership operations checked for linearizability.
const (
	OpClaim OpKind = iota
	OpRenew
	OpRelease
	OpSeize
	OpForceSeize
	OpOwner
)

func (k OpKind) String() string {
	return [...]string{"claim", "renew", "release", "seize", "force-seize", "owner"}[k]
}

// Result is the outcome of an ownership operation.
type Result int

// Outcomes. Failed is an error the store classified as "nothing written"
// (a refusal by the server, or a failed read); Unknown is ErrUnknown (the
// write may or may not have landed).
const (
	ResClaimed Result = iota
	ResRenewed
	ResReleased
	ResSeized
	ResOwned // owner: a live holder
	ResHeld
	ResFree
	ResNotOwner
	ResLive
	ResContended
	ResFailed
	ResUnknown
)

func (r Result) String() string {
	return [...]string{"claimed", "renewed", "released", "seized", "owned-by", "held-by", "free", "not-owner", "live", "contended", "failed", "unknown"}[r]
}

// OwnInput is an operation as invoked. Call and Return are wall-clock
// nanoseconds of the process that ran it; the model needs them because a
// lease's liveness is a matter of time (see ownModel).
type OwnInput struct {
	Kind   OpKind
	ID     string
	Node   string
	TTL    time.Duration
	Call   int64
	Return int64 // math.MaxInt64 when the outcome is unknown
}

// OwnOutput is what the operation returned: the outcome and, where the
// outcome carries them, the holder, epoch, expiry and record revision.
type OwnOutput struct {
	Res      Result
	Node     string
	Epoch    uint64
	Expires  int64 // unix nanos; 0 when not carried
	Revision uint64
}

// OwnOp is one recorded ownership operation.
type OwnOp struct {
	In  OwnInput
	Out OwnOutput
}

// Own runs one ownership operation against s, records it with its call and
// return times, and returns its output.
func (r *Recorder) Own(ctx context.Context, s *ownership.Store, kind OpKind, id, node string, ttl time.Duration) OwnOutput {
	in := OwnInput{Kind: kind, ID: id, Node: node, TTL: ttl, Call: time.Now().UnixNano()}
	var (
		l   *ownership.Lease
		st  ownership.Status
		err error
	)
	switch kind {
	case OpClaim:
		l, err = s.Claim(ctx, id, node, ttl)
	case OpRenew:
		l, err = s.Renew(ctx, id, node, ttl)
	case OpRelease:
		err = s.Release(ctx, id, node)
	case OpSeize, OpForceSeize:
		l, err = s.Seize(ctx, id, node, ttl, kind == OpForceSeize)
	case OpOwner:
		st, err = s.Owner(ctx, id)
	}
	in.Return = time.Now().UnixNano()
	out := classify(kind, l, st, err)
	if out.Res == ResUnknown {
		in.Return = math.MaxInt64
	}
	r.mu.Lock()
	r.ops = append(r.ops, OwnOp{in, out})
	r.mu.Unlock()
	return out
}

func classify(kind OpKind, l *ownership.Lease, st ownership.Status, err error) OwnOutput {
	var (
		held  *ownership.HeldError
		free  *ownership.FreeError
		not   *ownership.NotOwnerError
		live  *ownership.LiveError
		unkwn *ownership.UnknownError
	)
	switch {
	case err == nil:
		switch kind {
		case OpClaim:
			return OwnOutput{Res: ResClaimed, Node: l.Node, Epoch: l.Epoch, Expires: l.Expires.UnixNano(), Revision: l.Revision}
		case OpRenew:
			return OwnOutput{Res: ResRenewed, Node: l.Node, Epoch: l.Epoch, Expires: l.Expires.UnixNano(), Revision: l.Revision}
		case OpSeize, OpForceSeize:
			return OwnOutput{Res: ResSeized, Node: l.Node, Epoch: l.Epoch, Expires: l.Expires.UnixNano(), Revision: l.Revision}
		case OpRelease:
			return OwnOutput{Res: ResReleased}
		default:
			if st.Held {
				return OwnOutput{Res: ResOwned, Node: st.Node, Epoch: st.Epoch, Expires: st.Expires.UnixNano(), Revision: st.Revision}
			}
			return OwnOutput{Res: ResFree, Epoch: st.Epoch, Revision: st.Revision}
		}
	case errors.As(err, &unkwn):
		return OwnOutput{Res: ResUnknown}
	case errors.As(err, &held):
		return OwnOutput{Res: ResHeld, Node: held.Node, Epoch: held.Epoch, Expires: held.Expires.UnixNano()}
	case errors.As(err, &free):
		return OwnOutput{Res: ResFree, Epoch: free.LastEpoch}
	case errors.As(err, &not):
		return OwnOutput{Res: ResNotOwner, Node: not.Holder, Epoch: not.Epoch}
	case errors.As(err, &live):
		return OwnOutput{Res: ResLive, Node: live.Node, Epoch: live.Epoch, Expires: live.Expires.UnixNano()}
	case errors.Is(err, ownership.ErrContended):
		return OwnOutput{Res: ResContended}
	default:
		return OwnOutput{Res: ResFailed}
	}
}

// ownState is the model of one id's ownership record.
//
// Time. A lease is live while the deciding process's clock reads before its
// expiry, and the decision is taken at some instant inside the operation's
// [Call, Return] (every process of a test shares one clock). So an
// operation whose interval lies wholly before the expiry must see the
// lease live, wholly after it must see it lapsed, and one whose interval
// contains the expiry may see either: the model allows both, and then
// knows more (a live decision proves expires > Call, a lapsed one proves
// expires <= Return). An expiry is not always known exactly either: after a
// claim, seize or renewal whose outcome is unknown it is only known to lie
// in [Call+ttl, infinity). The state keeps [ExpLo, ExpHi] and narrows it
// when an output shows the exact value. No clock bound (δ, ρ) enters: all
// processes read the same clock.
//
// Revision. Revisions are bucket stream sequences shared with other keys,
// so the model cannot predict them; it checks that every write makes them
// grow and that a read shows the revision of the last write. After a
// release (which returns no revision) or an unknown write, only a lower
// bound is known (RevExact false: the revision is > Rev).
type ownState struct {
	Present  bool // the record was ever written
	Held     bool // state "held" (a lapsed lease is still Held)
	Node     string
	Epoch    uint64
	ExpLo    int64
	ExpHi    int64
	Rev      uint64
	RevExact bool
}

func (s ownState) canLive(in OwnInput) bool   { return s.Held && s.ExpHi > in.Call }
func (s ownState) canLapsed(in OwnInput) bool { return !s.Held || s.ExpLo <= in.Return }

// asLive narrows the state for a decision "live" inside in's interval.
func (s ownState) asLive(in OwnInput) ownState {
	s.ExpLo = max(s.ExpLo, in.Call+1)
	return s
}

func (s ownState) asLapsed(in OwnInput) ownState {
	if s.Held {
		s.ExpHi = min(s.ExpHi, in.Return)
	}
	return s
}

func (s ownState) expOK(x int64) bool { return x >= s.ExpLo && x <= s.ExpHi }

// revOK says whether r can be the record's revision now (a read).
func (s ownState) revOK(r uint64) bool {
	if s.RevExact {
		return r == s.Rev
	}
	return r > s.Rev
}

// wrote is the state after a write whose output is known.
func wrote(s ownState, node string, epoch uint64, exp int64, rev uint64) (ownState, bool) {
	if rev <= s.Rev {
		return s, false
	}
	return ownState{Present: true, Held: true, Node: node, Epoch: epoch, ExpLo: exp, ExpHi: exp, Rev: rev, RevExact: true}, true
}

// ownStep is the model's step: every state the record can be in after the
// operation, given its output; none if the output is impossible.
func ownStep(st, input, output any) []any {
	s, in, out := st.(ownState), input.(OwnInput), output.(OwnOutput)
	var next []any
	add := func(n ownState) { next = append(next, n) }
	if out.Res == ResFailed || out.Res == ResContended {
		// A failure, or contended (a single-attempt seize whose record
		// moved, or any operation whose conditional writes were all
		// refused), wrote nothing.
		add(s)
		return next
	}
	unknown := out.Res == ResUnknown
	if unknown {
		add(s) // it did not happen
	}
	// applied is the state after a write of node/epoch with expiry at least
	// lo, when the output does not show it.
	applied := func(s ownState, epoch uint64, lo int64) ownState {
		return ownState{Present: true, Held: true, Node: in.Node, Epoch: epoch, ExpLo: lo, ExpHi: math.MaxInt64, Rev: s.Rev, RevExact: false}
	}
	ttl := int64(in.TTL)
	newExpOK := func(x int64) bool { return x >= in.Call+ttl && x <= in.Return+ttl }
	switch in.Kind {
	case OpClaim:
		if s.canLive(in) && !unknown {
			l := s.asLive(in)
			if out.Res == ResHeld && out.Node == s.Node && out.Epoch == s.Epoch && l.expOK(out.Expires) {
				l.ExpLo, l.ExpHi = out.Expires, out.Expires
				add(l)
			}
		}
		if s.canLapsed(in) {
			l := s.asLapsed(in)
			switch {
			case unknown:
				add(applied(l, s.Epoch+1, in.Call+ttl))
			case out.Res == ResClaimed && out.Node == in.Node && out.Epoch == s.Epoch+1 && newExpOK(out.Expires):
				if n, ok := wrote(l, in.Node, out.Epoch, out.Expires, out.Revision); ok {
					add(n)
				}
			}
		}
	case OpOwner:
		if s.canLive(in) {
			l := s.asLive(in)
			if out.Res == ResOwned && out.Node == s.Node && out.Epoch == s.Epoch && l.expOK(out.Expires) && s.revOK(out.Revision) {
				l.ExpLo, l.ExpHi, l.Rev, l.RevExact = out.Expires, out.Expires, out.Revision, true
				add(l)
			}
		}
		if s.canLapsed(in) {
			l := s.asLapsed(in)
			if out.Res == ResFree && out.Epoch == s.Epoch && (!s.Present && out.Revision == 0 || s.Present && s.revOK(out.Revision)) {
				if s.Present {
					l.Rev, l.RevExact = out.Revision, true
				}
				add(l)
			}
		}
	case OpRelease:
		if s.canLive(in) {
			l := s.asLive(in)
			switch {
			case s.Node == in.Node && (unknown || out.Res == ResReleased):
				n := l
				n.Held, n.RevExact = false, false
				add(n)
			case s.Node != in.Node && out.Res == ResNotOwner && out.Node == s.Node:
				add(l)
			}
		}
		if s.canLapsed(in) && out.Res == ResFree && out.Epoch == s.Epoch {
			add(s.asLapsed(in))
		}
	case OpRenew:
		if s.canLive(in) {
			l := s.asLive(in)
			switch {
			case s.Node == in.Node && unknown:
				add(applied(l, s.Epoch, max(l.ExpLo, in.Call+ttl)))
			case s.Node == in.Node && out.Res == ResRenewed && out.Epoch == s.Epoch:
				// expires = max(old, w0+ttl), w0 inside the interval
				if out.Expires >= max(l.ExpLo, in.Call+ttl) && out.Expires <= max(l.ExpHi, in.Return+ttl) {
					if n, ok := wrote(l, in.Node, s.Epoch, out.Expires, out.Revision); ok {
						add(n)
					}
				}
			case s.Node != in.Node && out.Res == ResHeld && out.Node == s.Node && out.Epoch == s.Epoch && l.expOK(out.Expires):
				l.ExpLo, l.ExpHi = out.Expires, out.Expires
				add(l)
			}
		}
		if s.canLapsed(in) && out.Res == ResFree && out.Epoch == s.Epoch {
			add(s.asLapsed(in))
		}
	case OpSeize, OpForceSeize:
		force := in.Kind == OpForceSeize
		if !s.Held {
			if out.Res == ResFree && out.Epoch == s.Epoch {
				add(s)
			}
			break
		}
		take := func(l ownState) {
			switch {
			case unknown:
				add(applied(l, s.Epoch+1, in.Call+ttl))
			case out.Res == ResSeized && out.Node == in.Node && out.Epoch == s.Epoch+1 && newExpOK(out.Expires):
				if n, ok := wrote(l, in.Node, out.Epoch, out.Expires, out.Revision); ok {
					add(n)
				}
			}
		}
		if s.canLive(in) {
			l := s.asLive(in)
			if force {
				take(l)
			} else if out.Res == ResLive && out.Node == s.Node && out.Epoch == s.Epoch && l.expOK(out.Expires) {
				l.ExpLo, l.ExpHi = out.Expires, out.Expires
				add(l)
			}
		}
		if s.canLapsed(in) {
			take(s.asLapsed(in))
		}
	}
	return next
}

// OwnershipModel is the porcupine model of the ownership record of one id,
// partitioned by id.
var OwnershipModel = porcupine.NondeterministicModel{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		byID := map[string][]porcupine.Operation{}
		var order []string
		for _, op := range h {
			id := op.Input.(OwnInput).ID
			if _, ok := byID[id]; !ok {
				order = append(order, id)
			}
			byID[id] = append(byID[id], op)
		}
		var out [][]porcupine.Operation
		for _, id := range order {
			out = append(out, byID[id])
		}
		return out
	},
	Init: func() []any { return []any{ownState{ExpHi: math.MinInt64, ExpLo: math.MinInt64}} },
	Step: ownStep,
	DescribeOperation: func(input, output any) string {
		in, out := input.(OwnInput), output.(OwnOutput)
		return fmt.Sprintf("%s(%s, %s) -> %s node=%s epoch=%d rev=%d", in.Kind, in.ID, in.Node, out.Res, out.Node, out.Epoch, out.Revision)
	},
	DescribeState: func(state any) string {
		s := state.(ownState)
		return fmt.Sprintf("%+v", s)
	},
}

// LinResult is the outcome of CheckOwnership.
type LinResult struct {
	Result  porcupine.CheckResult
	Ops     int
	Unknown int
	Info    porcupine.LinearizationInfo
}

// CheckOwnership checks the recorded ownership operations for
// linearizability against OwnershipModel (Ok, Illegal, or Unknown when the
// search ran out of time).
func CheckOwnership(ops []OwnOp, timeout time.Duration) LinResult {
	h := make([]porcupine.Operation, 0, len(ops))
	res := LinResult{Ops: len(ops)}
	for i, op := range ops {
		if op.Out.Res == ResUnknown {
			res.Unknown++
		}
		h = append(h, porcupine.Operation{ClientId: i, Input: op.In, Call: op.In.Call, Output: op.Out, Return: op.In.Return})
	}
	res.Result, res.Info = porcupine.CheckOperationsVerbose(OwnershipModel.ToModel(), h, timeout)
	return res
}

// Explain checks each id on its own and describes the first one that is
// not linearizable: its longest partial linearization (the operations
// porcupine could order) and every operation of that id in call order,
// with times relative to the first call.
func Explain(ops []OwnOp, timeout time.Duration) string {
	byID := map[string][]OwnOp{}
	for _, op := range ops {
		byID[op.In.ID] = append(byID[op.In.ID], op)
	}
	var ids []string
	for id := range byID {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var b strings.Builder
	for _, id := range ids {
		res := CheckOwnership(byID[id], timeout)
		if res.Result == porcupine.Ok {
			continue
		}
		fmt.Fprintf(&b, "id %s: %s (%d ops)\n", id, res.Result, len(byID[id]))
		part := byID[id]
		sort.Slice(part, func(i, j int) bool { return part[i].In.Call < part[j].In.Call })
		t0 := part[0].In.Call
		rel := func(t int64) string {
			if t == math.MaxInt64 {
				return "inf"
			}
			return fmt.Sprintf("%.6fs", float64(t-t0)/1e9)
		}
		desc := func(op OwnOp) string {
			return fmt.Sprintf("[%s, %s] %s(%s ttl=%v) -> %s node=%s epoch=%d expires=%s rev=%d",
				rel(op.In.Call), rel(op.In.Return), op.In.Kind, op.In.Node, op.In.TTL, op.Out.Res, op.Out.Node, op.Out.Epoch, rel(op.Out.Expires), op.Out.Revision)
		}
		longest := []porcupine.Operation{}
		for _, p := range res.Info.PartialLinearizationsOperations() {
			for _, l := range p {
				if len(l) > len(longest) {
					longest = l
				}
			}
		}
		fmt.Fprintf(&b, "longest partial linearization (%d ops), last 15:\n", len(longest))
		for _, o := range longest[max(0, len(longest)-15):] {
			fmt.Fprintf(&b, "  %s\n", desc(OwnOp{o.Input.(OwnInput), o.Output.(OwnOutput)}))
		}
		fmt.Fprintf(&b, "all ops:\n")
		for _, op := range part {
			fmt.Fprintf(&b, "  %s\n", desc(op))
		}
		return b.String()
	}
	return "every id is linearizable on its own"
}
