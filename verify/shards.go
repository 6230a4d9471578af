package verify

import (
	"github.com/fencepost/fencepost/testkit/history"
)

// shardReport checks a sharded world's run (Meta.Shards > 0; docs/contract.md,
// "Sharded worlds"; rep: history.Check of its history) with
// history.ShardReport, which the fault suite (testkit/faults) shares: lost, unexpected and order per id; stale
// deliveries, stale commits, cursor back and takeovers per shard unit; and
// every shard cursor write checked against the deliveries of the messages
// it newly covers. When the follower may have missed a cursor write (a
// skipped or unattributed one), a covered message may have been committed
// by the write it missed, so delivery under the write's epoch or an older
// one is enough.
func shardReport(rec *Recorded, rep history.Report) history.Report {
	lenient := rec.Coverage.Skipped > 0 || rec.Coverage.Unattributed > 0
	return history.ShardReport(rec.History, rep, rec.Meta.Shards, rec.Pending, lenient)
}

// unitOf is the unit whose record owns id in a world of shards shards:
// the id itself in a per-id world (0), its shard's unit in a sharded one.
func unitOf(id string, shards int) string { return history.UnitOf(id, shards) }
