package worker

import (
	"github.com/nats-io/nats.go/jetstream"
)

// keptMax bounds the messages a worker keeps for ids it does not hold (all
// ids together); keptIDsMax bounds the ids it remembers it could not keep
// whole. Beyond either, it stops keeping.
const (
	keptMax    = 100_000
	keptIDsMax = 1_000_000
)

// kept holds, for each id the worker does not hold, every message of it
// that the worker's consumer read, while it can vouch that they are all
// of the id's stored messages (docs/design/pipeline.md point 6): the consumer
// reads every mailbox from the stream's first message on, so the first
// message of an id it sees is the id's first stored one, and from then on
// it sees every later one. When the worker then claims the id, its first
// delivery hands those messages out (drain.Holding.Start) instead of
// reading the mailbox. An id whose messages the worker let go (another
// node holds it, the worker held it before, the bound was reached) is
// "gone": its first delivery is a drain from its cursor, as before.
//
// On a partitioned world (chained) the worker reads only the posts of its
// partitions, from when it subscribed, and cannot vouch that it saw an
// id's first message; but each republished post names its predecessor, so
// the kept messages prove themselves against the cursor the holding reads
// (drain.Holding.Start drains when they do not). What they must have is
// every post of the id stored after the first of them: the subscription
// that brought them was in place all along. So only posts of the
// partitions the worker serves are kept, and what is kept of an id goes
// when a subscription to its partition here ended since the first of them
// (addSince, takeSince), and all of it when the connection reconnected
// (reset) (docs/design/partitions.md, "The first delivery"). There an id is gone
// only while another node holds it (nothing is kept for it), until the
// watch shows it free.
//
// All of it is guarded by Worker.mu, so that handing an id's messages to
// a new holding and routing the next one to its inbox are one step.
type kept struct {
	msgs    map[string][]*jetstream.RawStreamMsg
	n       int             // messages in msgs
	gone    map[string]bool // ids whose kept messages are not all of them
	off     bool            // no keeping (the consumer does not read from the first message, or a bound was reached)
	chained bool            // the messages name their predecessors (a partitioned world)
	// endsAt (chained): for each id with messages kept, how many
	// subscriptions to its partition here had ended (parts.ends) when the
	// first of them was kept.
	endsAt map[string]uint64
}

func newKept(on bool) *kept {
	return &kept{msgs: map[string][]*jetstream.RawStreamMsg{}, gone: map[string]bool{}, endsAt: map[string]uint64{}, off: !on}
}

// newChainedKept keeps the posts of a partitioned world.
func newChainedKept() *kept {
	k := newKept(true)
	k.chained = true
	return k
}

// reset lets every kept message go: some post may not have reached the
// worker since (a partition left it, the connection reconnected). Chained
// keeping goes on from now; the other stops for good.
func (k *kept) reset() {
	if !k.chained {
		k.off = true
	}
	k.msgs, k.gone, k.endsAt, k.n = map[string][]*jetstream.RawStreamMsg{}, map[string]bool{}, map[string]uint64{}, 0
}

// addSince keeps m, a post of id, which the worker does not hold, brought
// by a subscription to id's partition after ends of them ended (chained).
// What was kept of id before the last of those ends goes first.
func (k *kept) addSince(id string, m *jetstream.RawStreamMsg, ends uint64) {
	if len(k.msgs[id]) > 0 && k.endsAt[id] != ends {
		k.forget(id)
	}
	if len(k.msgs[id]) == 0 {
		k.endsAt[id] = ends
	}
	k.add(id, m)
}

// takeSince is take for a claim that made sure id's posts reach the worker
// (parts.hold) when ends subscriptions to its partition here had ended: a
// chained id's posts are not handed over when one more ended since the
// first of them (posts after it may have reached another worker).
func (k *kept) takeSince(id string, ends uint64) ([]*jetstream.RawStreamMsg, bool) {
	if k.chained && len(k.msgs[id]) > 0 && k.endsAt[id] != ends {
		k.forget(id)
	}
	return k.take(id)
}

// forget lets id's kept messages go, and keeps what comes next.
func (k *kept) forget(id string) {
	k.n -= len(k.msgs[id])
	delete(k.msgs, id)
	delete(k.endsAt, id)
}

// free: the watch shows id free (released, lapsed or deleted). Chained
// keeping keeps its posts again: they prove themselves at the claim.
func (k *kept) free(id string) {
	if k.chained {
		delete(k.gone, id)
	}
}

// add keeps m, a message of id, which the worker does not hold.
func (k *kept) add(id string, m *jetstream.RawStreamMsg) {
	if k.off || k.gone[id] {
		return
	}
	if k.n >= keptMax {
		k.drop(id)
		return
	}
	k.msgs[id] = append(k.msgs[id], m)
	k.n++
}

// drop lets id's messages go: from now on they are not all kept.
func (k *kept) drop(id string) {
	if k.off {
		return
	}
	k.forget(id)
	k.gone[id] = true
	if len(k.gone) >= keptIDsMax {
		k.reset()
	}
}

// take hands over id's kept messages for its new holding; whole says
// whether its first delivery is to start from them (drain.Holding.Start):
// they are every stored message of id, or (chained) there are some. id is
// gone afterwards: the holding gets its messages in its inbox, and once it
// ends they are not kept whole any more; chained keeping keeps the posts
// after that again, since they prove themselves.
func (k *kept) take(id string) (msgs []*jetstream.RawStreamMsg, whole bool) {
	if k.off || k.gone[id] {
		return nil, false
	}
	msgs = k.msgs[id]
	if k.chained {
		k.forget(id)
		return msgs, len(msgs) > 0
	}
	k.drop(id)
	return msgs, true
}
