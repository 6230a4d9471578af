package wire

import (
	"fmt"
	"strconv"
	"strings"
)

// Sharded worlds (docs/contract.md, "Sharded worlds"; docs/design.md,
// "Shards"). A world created with shards n divides its ids into n shards
// by Partition of the id's token, and the unit of ownership is the shard:
// one ownership record, epoch and lease per shard, and one cursor per
// shard that every commit of the shard's mail writes, fenced by the
// shard's record.
//
// Producers post as to any world, on fp.<world>.mb.<eid>. The mailbox
// stream stores each post under its shard, fp.<world>.ms.<shard>.<eid>
// (the stream's subject transform, which computes Partition as the
// server's {{partition(n,1)}}), so that one filter reads a shard's mail in
// stream order and one purge removes a shard's committed mail.

// MaxShards bounds a world's shards.
const MaxShards = 1024

// ShardOf is the shard of id among n.
func ShardOf(id string, n int) int { return Partition(EncodeID(id), n) }

// shardUnitPrefix begins the ownership unit of a shard (ShardUnit).
const shardUnitPrefix = "shard/"

// ShardUnit is the name a shard's ownership record, cursor and drain lock
// are keyed by, in place of an id: RecordKey(ShardUnit(q)) and so on. In a
// sharded world no id has keys of its own (every operation on an id acts
// on its shard's unit), so the names cannot meet an id's.
func ShardUnit(q int) string { return shardUnitPrefix + strconv.Itoa(q) }

// UnitShard is the shard a unit names (ShardUnit), and false for anything
// else.
func UnitShard(unit string, n int) (int, bool) {
	s, ok := strings.CutPrefix(unit, shardUnitPrefix)
	if !ok {
		return 0, false
	}
	q, err := strconv.Atoi(s)
	if err != nil || q < 0 || q >= n || strconv.Itoa(q) != s {
		return 0, false
	}
	return q, true
}

// ValidateShard checks a shard number among n.
func ValidateShard(q, n int) error {
	if q < 0 || q >= n {
		return fmt.Errorf("%w: shard %d is outside 0..%d", ErrInvalidID, q, n-1)
	}
	return nil
}

// ShardedTransformSource is what the mailbox stream of a sharded world
// transforms: every post to a mailbox.
func ShardedTransformSource(world string) string { return MailboxFilter(world) }

// ShardedTransformDestination stores a post under its shard among n.
func ShardedTransformDestination(world string, n int) string {
	return "fp." + world + ".ms.{{partition(" + strconv.Itoa(n) + ",1)}}.{{wildcard(1)}}"
}

// ShardMailboxSubject is the stored subject of id's mailbox in a world of
// n shards.
func ShardMailboxSubject(world, id string, n int) string {
	eid := EncodeID(id)
	return "fp." + world + ".ms." + strconv.Itoa(Partition(eid, n)) + "." + eid
}

// ShardFilter matches the stored mail of shard q.
func ShardFilter(world string, q int) string {
	return "fp." + world + ".ms." + strconv.Itoa(q) + ".*"
}

// ShardedMailboxFilter matches the stored mail of every shard.
func ShardedMailboxFilter(world string) string { return "fp." + world + ".ms.*.*" }

// ShardedID is the id, its token and its shard of a stored subject of a
// sharded world (fp.<world>.ms.<shard>.<eid>), the shard checked against
// the id among n.
func ShardedID(world, subject string, n int) (id, eid string, q int, err error) {
	rest, ok := strings.CutPrefix(subject, "fp.")
	if ok {
		rest, ok = strings.CutPrefix(rest, world)
	}
	if ok {
		rest, ok = strings.CutPrefix(rest, ".ms.")
	}
	var qs string
	if ok {
		qs, eid, ok = strings.Cut(rest, ".")
	}
	if ok {
		q = Partition(eid, n)
		ok = n > 0 && qs == strconv.Itoa(q)
	}
	if !ok {
		return "", "", 0, fmt.Errorf("%w: %q is not a stored post of world %q in %d shards", ErrInvalidID, subject, world, n)
	}
	if id, err = DecodeID(eid); err != nil {
		return "", "", 0, err
	}
	return id, eid, q, nil
}

// ShardedUnroutable is the shard a stored subject of a sharded world is
// under when its token is no id's (a producer posted to a mailbox subject
// that encodes no id: the transform stored it all the same), and -1 for
// any other subject.
func ShardedUnroutable(world, subject string, n int) int {
	rest, ok := strings.CutPrefix(subject, "fp."+world+".ms.")
	if !ok {
		return -1
	}
	qs, tok, ok := strings.Cut(rest, ".")
	if !ok || n <= 0 || qs != strconv.Itoa(Partition(tok, n)) {
		return -1
	}
	if _, err := DecodeID(tok); err == nil {
		return -1
	}
	return Partition(tok, n)
}

// ShardedToken is the token of a stored mailbox subject of a sharded world
// (fp.<world>.ms.<shard>.<token>), and false for any other subject. The
// token may be no id's (an unroutable post).
func ShardedToken(world, subject string) (string, bool) {
	rest, ok := strings.CutPrefix(subject, "fp."+world+".ms.")
	if !ok {
		return "", false
	}
	_, tok, ok := strings.Cut(rest, ".")
	if !ok || tok == "" || strings.Contains(tok, ".") {
		return "", false
	}
	return tok, true
}
