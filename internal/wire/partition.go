package wire

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
)

// Partitioned delivery (docs/design/partitions.md). A world created with
// partitions has its mailbox stream republish every post, once stored, to
// fp.<world>.rp.<partition>.<eid>: the stream's RePublish, whose partition
// transform puts the post's id token in one of n partitions. The stored
// subjects, the producers' subjects and every reader of the mailbox stay as
// they are; a worker subscribes to the partitions it serves instead of
// reading every post.

// MaxPartitions bounds a world's partitions.
const MaxPartitions = 1024

// Headers the server adds to a republished message (JetStream's own).
const (
	HeaderRepublishStream  = "Nats-Stream"
	HeaderRepublishSubject = "Nats-Subject"       // the stored subject
	HeaderRepublishSeq     = "Nats-Sequence"      // the stored sequence
	HeaderRepublishTime    = "Nats-Time-Stamp"    // when it was stored, RFC 3339
	HeaderLastSeq          = "Nats-Last-Sequence" // the subject's previous stored message (0: none)
)

// Partition is the partition of the id whose subject token is eid among n:
// FNV-1a of the token modulo n, as the server's {{partition(n,1)}} computes
// it (bench.TestFeedPartition holds the two together).
func Partition(eid string, n int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(eid))
	return int(h.Sum32() % uint32(n))
}

// RepublishSource is the subjects the mailbox stream republishes: every
// mailbox (not the dead letters).
func RepublishSource(world string) string { return MailboxFilter(world) }

// RepublishDestination is the mailbox stream's republish destination for n
// partitions: the partition of the post's id token, then the token.
func RepublishDestination(world string, n int) string {
	return "fp." + world + ".rp.{{partition(" + strconv.Itoa(n) + ",1)}}.{{wildcard(1)}}"
}

// RepublishPartitionFilter matches every post republished to partition p.
func RepublishPartitionFilter(world string, p int) string {
	return "fp." + world + ".rp." + strconv.Itoa(p) + ".*"
}

// RepublishSubject is the subject id's posts are republished to among n
// partitions.
func RepublishSubject(world, id string, n int) string {
	eid := EncodeID(id)
	return "fp." + world + ".rp." + strconv.Itoa(Partition(eid, n)) + "." + eid
}

// RepublishFilter matches every republished post of a world (an owner's
// subscribe permission).
func RepublishFilter(world string) string { return "fp." + world + ".rp.>" }

// RepublishedID is the id whose post a republished message carries, and
// its token, from the subject it came on (fp.<world>.rp.<p>.<eid>): the
// token checked as MailboxID checks a mailbox subject's, and the partition
// checked against it among n. The subject is the server's; the message's
// headers begin with the post's own, which a producer may have named like
// the server's.
func RepublishedID(world, subject string, n int) (id, eid string, err error) {
	// Prefix by prefix, as MailboxToken: no subject built per post.
	rest, ok := strings.CutPrefix(subject, "fp.")
	if ok {
		rest, ok = strings.CutPrefix(rest, world)
	}
	if ok {
		rest, ok = strings.CutPrefix(rest, ".rp.")
	}
	if !ok {
		return "", "", fmt.Errorf("%w: %q is not a republished post of world %q", ErrInvalidID, subject, world)
	}
	p, eid, ok := strings.Cut(rest, ".")
	if !ok || n <= 0 || p != strconv.Itoa(Partition(eid, n)) {
		return "", "", fmt.Errorf("%w: %q is not a republished post of world %q in %d partitions", ErrInvalidID, subject, world, n)
	}
	if id, err = DecodeID(eid); err != nil {
		return "", "", err
	}
	return id, eid, nil
}
