package history

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/fencepost/fencepost/internal/wire"
)

// The checks of a sharded world (docs/contract.md, "Sharded worlds";
// docs/design.md 3.14). There the unit of ownership is the shard: records,
// epochs, fences and cursors are the shard units' (wire.ShardUnit), and one
// shard cursor (wire.ShardCursor) commits the messages of many ids.
// fencepost verify --shards and the fault suite's sharded scenarios
// (testkit/faults) check their runs with CheckShards.

// CheckShards checks the history of a world of n shards whose commits are
// shard cursor writes (Commit.ID a shard unit, Commit.Cursor the cursor's
// mark; pending the exceptions of each write that had any, by its bucket
// sequence):
//
//   - lost, unexpected and order stay per id: Check of h as recorded;
//   - stale deliveries, stale commits, cursor back and takeovers are per
//     unit: Check of h with every send and delivery named by its id's
//     shard unit (each producer posts to one id, so its chains are the
//     same), so that an epoch of a shard proven by any of its ids'
//     deliveries or commits supersedes the older epochs of all of them;
//   - coverage: a shard cursor write accepted under the shard record's
//     epoch E is legitimate only if every message of the shard it newly
//     covers (covered by it, not by the cursor written before it) was
//     delivered under E before the write was read (Commit.At; wall clock,
//     one machine). A message it covers that no handler got under E is a
//     stale commit; one no handler got at all is also lost. lenient: the
//     commits may lack a cursor write (the reader of the bucket stream
//     skipped one, or could not name its holder), which may have
//     committed a covered message, so delivery under E or an older epoch
//     is enough.
//
// The messages of a shard are those acknowledged as posted and those
// delivered (a send of unknown outcome may be stored too).
func CheckShards(h History, n int, pending map[uint64]map[string]wire.PendingID, lenient bool) Report {
	return ShardReport(h, Check(h), n, pending, lenient)
}

// ShardReport is CheckShards for a caller that has Check(h) already (rep).
func ShardReport(h History, rep Report, n int, pending map[uint64]map[string]wire.PendingID, lenient bool) Report {
	hu := History{Sends: slices.Clone(h.Sends), Deliveries: slices.Clone(h.Deliveries), Commits: h.Commits}
	for i := range hu.Sends {
		hu.Sends[i].ID = UnitOf(hu.Sends[i].ID, n)
	}
	for i := range hu.Deliveries {
		hu.Deliveries[i].ID = UnitOf(hu.Deliveries[i].ID, n)
	}
	ru := Check(hu)
	out := rep
	out.StaleDeliveries, out.StaleCommits, out.CursorBack, out.Takeovers = ru.StaleDeliveries, ru.StaleCommits, ru.CursorBack, ru.Takeovers
	out.Examples, out.Violations = nil, nil
	keep := func(r Report, unitKinds bool) {
		for i, v := range r.Violations {
			if unitKind[v.Kind] == unitKinds {
				out.Examples, out.Violations = addExample(out.Examples, out.Violations, r.Examples[i], v)
			}
		}
	}
	keep(rep, false)
	keep(ru, true)
	for _, v := range coverage(h, pending, n, lenient) {
		out.StaleCommits++
		out.Examples, out.Violations = addExample(out.Examples, out.Violations, v.text, v.Violation)
	}
	return out
}

// UnitOf is the unit whose record owns id in a world of n shards: the id
// itself in a per-id world (n 0), its shard's unit in a sharded one.
func UnitOf(id string, n int) string {
	if n == 0 {
		return id
	}
	return wire.ShardUnit(wire.ShardOf(id, n))
}

// unitKind are the violations the per-unit check reports.
var unitKind = map[string]bool{"stale commit": true, "stale delivery": true, "cursor back": true}

// shardMsg is one message of a shard: its sequence and its id's token.
type shardMsg struct {
	seq uint64
	eid string
}

type coverageViolation struct {
	Violation
	text string
}

// coverage checks each shard cursor write of h.Commits (their exceptions
// in pending, by bucket sequence) against the deliveries of the messages
// it newly covers: see CheckShards. lenient: delivery under the write's
// epoch or an older one is enough.
func coverage(h History, pending map[uint64]map[string]wire.PendingID, n int, lenient bool) []coverageViolation {
	// The messages of each shard, sorted, and per id token.
	seen := map[uint64]bool{}
	byShard := map[int][]shardMsg{}
	add := func(id string, seq uint64) {
		if seq == 0 || seen[seq] {
			return
		}
		seen[seq] = true
		eid := wire.EncodeID(id)
		q := wire.Partition(eid, n)
		byShard[q] = append(byShard[q], shardMsg{seq, eid})
	}
	for _, s := range h.Sends {
		if s.Outcome == Posted {
			add(s.ID, s.Seq)
		}
	}
	delivered := map[uint64][]Delivery{}
	for _, d := range h.Deliveries {
		add(d.ID, d.Seq)
		delivered[d.Seq] = append(delivered[d.Seq], d)
	}
	byEID := map[int]map[string][]uint64{}
	for q, ms := range byShard {
		slices.SortFunc(ms, func(a, b shardMsg) int { return cmp.Compare(a.seq, b.seq) })
		ids := map[string][]uint64{}
		for _, m := range ms {
			ids[m.eid] = append(ids[m.eid], m.seq)
		}
		byEID[q] = ids
	}
	// Each shard's writes in bucket order.
	commits := map[int][]Commit{}
	for _, c := range h.Commits {
		if q, ok := wire.UnitShard(c.ID, n); ok {
			commits[q] = append(commits[q], c)
		}
	}
	var out []coverageViolation
	for _, q := range slices.Sorted(maps.Keys(commits)) {
		cs := commits[q]
		slices.SortFunc(cs, func(a, b Commit) int { return cmp.Compare(a.StreamSeq, b.StreamSeq) })
		var prev wire.ShardCursor
		for _, c := range cs {
			cur := wire.ShardCursor{Seq: c.Cursor, Pending: pending[c.StreamSeq]}
			var bad []shardMsg
			for _, m := range newlyCovered(prev, cur, byShard[q], byEID[q]) {
				if !deliveredUnder(delivered[m.seq], c, lenient) {
					bad = append(bad, m)
				}
			}
			prev = cur
			if len(bad) == 0 {
				continue
			}
			id, _ := wire.DecodeID(bad[0].eid)
			what := "never delivered"
			if ds := delivered[bad[0].seq]; len(ds) > 0 {
				what = "delivered only under"
				for _, d := range ds {
					what += fmt.Sprintf(" %s/%d at %s", d.Node, d.Epoch, d.At.Format(time.RFC3339Nano))
				}
			}
			out = append(out, coverageViolation{
				Violation: Violation{Kind: "stale commit", ID: c.ID, Seq: c.Cursor, At: c.At},
				text: fmt.Sprintf("stale commit: %s: %s/%d stored cursor %d (bucket seq %d, read at %s) covering %d message(s) not delivered under epoch %d before it: %s seq %d %s",
					c.ID, c.Node, c.Epoch, c.Cursor, c.StreamSeq, c.At.Format(time.RFC3339Nano), len(bad), c.Epoch, id, bad[0].seq, what),
			})
		}
	}
	return out
}

// newlyCovered are the messages of a shard (ms: sorted by sequence;
// byEID: their sequences per id token, sorted) that cur covers and prev
// did not.
func newlyCovered(prev, cur wire.ShardCursor, ms []shardMsg, byEID map[string][]uint64) []shardMsg {
	var out []shardMsg
	// Above the previous mark: every message up to the new mark that cur
	// does not except.
	i, _ := slices.BinarySearchFunc(ms, prev.Seq+1, func(m shardMsg, seq uint64) int { return cmp.Compare(m.seq, seq) })
	for ; i < len(ms) && ms[i].seq <= cur.Seq; i++ {
		if cur.Committed(ms[i].eid, ms[i].seq) {
			out = append(out, ms[i])
		}
	}
	// At or below it: the messages prev excepted.
	for eid, p := range prev.Pending {
		seqs := byEID[eid]
		j, _ := slices.BinarySearch(seqs, p.Seq)
		for ; j < len(seqs) && seqs[j] <= prev.Seq; j++ {
			if cur.Committed(eid, seqs[j]) {
				out = append(out, shardMsg{seqs[j], eid})
			}
		}
	}
	return out
}

// deliveredUnder says whether one of ds (the deliveries of one message)
// was made under c's epoch (lenient: or an older one), its handler entered
// no later than c was read.
func deliveredUnder(ds []Delivery, c Commit, lenient bool) bool {
	for _, d := range ds {
		if (d.Epoch == c.Epoch || lenient && d.Epoch < c.Epoch) && !d.At.After(c.At) {
			return true
		}
	}
	return false
}
