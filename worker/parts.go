package worker

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/wire"
)

// parts is the feed of a worker of a partitioned world
// (docs/design/partitions.md): instead of one consumer of every post, core subscriptions to the
// posts the mailbox stream republishes to the partitions this worker
// serves (those whose first choice it is among the live nodes), and to the
// posts of each id it holds outside them. A message of a held id goes to
// its inbox; another id's post makes it a candidate, as with the
// consumer. Core NATS may lose a message (a reconnect): each republished
// post names its subject's previous message, so the holding sees the gap
// (drain.Holding.Deliver) and drains from its cursor, and a reconnect
// flags every holding and asks for a scan.
//
// A worker of a list of ids (listed) serves no partition: it subscribes to
// each listed id's posts, from its start until it stops, and so reads
// each post of its ids once, as its consumer did, without a consumer on
// the mailbox stream besides the server's republish.
type parts struct {
	n      int // the world's partitions
	world  string
	listed map[string]bool // a worker of a list of ids: the ids; nil: of every id
	nc     *nats.Conn
	on     nats.MsgHandler

	mu   sync.Mutex
	mine map[int]*nats.Subscription    // the partitions served
	own  map[string]*nats.Subscription // held ids outside them, by id
	want map[string]int                // ids being claimed or held here, and their partitions
	// reconnects: the connection's count when last looked at.
	reconnects uint64
	// ends counts, for each partition, its subscriptions here that ended:
	// an id's posts kept before its partition's ended may be followed by
	// posts that never reached this worker (kept).
	ends []uint64
	// received counts the posts received (tests).
	received atomic.Int64

	// mail: ids that may have mail waiting, as far as this worker can
	// tell without following the cursors (unread): a post of the id came,
	// a scan listed it, or this worker's holding of it was taken over,
	// since the watch last showed it claimed, seized or deleted or this
	// worker released it. A lapse keeps it (the holder died, maybe with
	// the mail uncommitted), and so does another node's release.
	mailMu sync.Mutex
	mail   map[string]bool
}

// maxListed bounds the ids of a worker of a list that subscribes to each
// one's posts; a longer list reads every post with a consumer, as on a
// world without partitions.
const maxListed = 1024

func newParts(w string, n int, listed map[string]bool) *parts {
	return &parts{n: n, world: w, listed: listed, mine: map[int]*nats.Subscription{}, own: map[string]*nats.Subscription{}, want: map[string]int{}, mail: map[string]bool{}, ends: make([]uint64, n)}
}

// partition is id's partition.
func (p *parts) partition(id string) int { return wire.Partition(wire.EncodeID(id), p.n) }

// partKey is what orders the nodes for an id of partition q (claimWait),
// so that an id's first choice is the node that reads its posts.
func partKey(q int) string { return "partition " + strconv.Itoa(q) }

// start subscribes to every partition until the live nodes are listed
// (more reading than needed, never less); a worker of a list, to each of
// its ids, in place at the server before it claims any.
func (p *parts) start(nc *nats.Conn, on nats.MsgHandler) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.nc, p.on = nc, on
	p.reconnects = nc.Stats().Reconnects
	if p.listed != nil {
		for id := range p.listed {
			s, err := p.subscribe(wire.RepublishSubject(p.world, id, p.n))
			if err != nil {
				return err
			}
			p.want[id], p.own[id] = p.partition(id), s
		}
		if err := p.nc.Flush(); err != nil {
			return fmt.Errorf("worker: subscribe to the ids' posts: %w", err)
		}
		return nil
	}
	all := map[int]bool{}
	for q := range p.n {
		all[q] = true
	}
	_, err := p.assignLocked(all)
	return err
}

// stop ends every subscription; a claim that ends after it subscribes to
// nothing (hold).
func (p *parts) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.nc = nil
	for q, s := range p.mine {
		_ = s.Unsubscribe()
		delete(p.mine, q)
	}
	for id, s := range p.own {
		_ = s.Unsubscribe()
		delete(p.own, id)
	}
}

// assign serves the partitions in mine from now on; gained says whether
// any is new. A held id whose partition goes gets a subscription of its
// own first, and every new subscription is in place at the server before
// any old one ends: no post of a held id falls between the two.
func (p *parts) assign(mine map[int]bool) (gained bool, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.nc == nil || p.listed != nil {
		return false, nil
	}
	return p.assignLocked(mine)
}

func (p *parts) assignLocked(mine map[int]bool) (gained bool, err error) {
	if len(mine) == len(p.mine) {
		same := true
		for q := range mine {
			if p.mine[q] == nil {
				same = false
				break
			}
		}
		if same {
			return false, nil // the usual case: every few hundred ms, nothing changed
		}
	}
	for q := range mine {
		if p.mine[q] != nil {
			continue
		}
		s, err := p.subscribe(wire.RepublishPartitionFilter(p.world, q))
		if err != nil {
			return gained, err
		}
		p.mine[q], gained = s, true
	}
	for id, q := range p.want {
		if !mine[q] && p.own[id] == nil {
			s, err := p.subscribe(wire.RepublishSubject(p.world, id, p.n))
			if err != nil {
				return gained, err
			}
			p.own[id] = s
		}
	}
	if err := p.nc.Flush(); err != nil {
		return gained, fmt.Errorf("worker: subscribe to the partitions: %w", err)
	}
	// The old subscriptions are drained, not just ended: posts the
	// client has received and not yet routed are routed, not dropped
	// (Unsubscribe drops them). A post stored before the new
	// subscription was in place at the server reached only the old one:
	// dropped there, a held id's post was lost with none after it, and a
	// cold id's holder never saw it (a zipf run: 73-80 s until the
	// owners stopped).
	for q, s := range p.mine {
		if !mine[q] {
			p.ends[q]++ // before the posts stop, and in the same step as serves says so
			_ = s.Drain()
			delete(p.mine, q)
		}
	}
	for id, s := range p.own {
		if q, ok := p.want[id]; !ok || mine[q] {
			_ = s.Drain()
			delete(p.own, id)
		}
	}
	return gained, nil
}

// hold makes sure id's posts reach this worker from now on: its partition
// is served here, or it gets a subscription of its own, in place at the
// server when hold returns. Call it before the holding's first drain, as
// the holding enters the worker's map before it: every post stored after
// that drain's read then reaches the inbox (or its loss shows).
func (p *parts) hold(id string) error {
	q := p.partition(id)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.want[id] = q
	if p.nc == nil || p.mine[q] != nil || p.own[id] != nil {
		return nil
	}
	s, err := p.subscribe(wire.RepublishSubject(p.world, id, p.n))
	if err != nil {
		return err
	}
	p.own[id] = s
	return p.nc.Flush()
}

// drop: id is no longer held here. A listed id's posts keep coming: the
// next one makes it a candidate again.
func (p *parts) drop(id string) {
	if p.listed[id] {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.want, id)
	if s := p.own[id]; s != nil {
		_ = s.Drain() // what it received is routed: the id is a candidate again
		delete(p.own, id)
	}
}

// reconnected says whether the connection reconnected since it last
// looked: posts may have been lost meanwhile.
func (p *parts) reconnected() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.nc == nil {
		return false
	}
	n := p.nc.Stats().Reconnects
	changed := n != p.reconnects
	p.reconnects = n
	return changed
}

// serves says whether id's posts reach this worker without a claim: its
// partition is served here, or it is a listed id.
func (p *parts) serves(id string) bool {
	if p.listed[id] {
		return true
	}
	q := p.partition(id)
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mine[q] != nil
}

// servesSince says whether sub, which brought a post of id, is the
// subscription that serves id here now (its partition's, or a listed id's
// own; not one draining after its partition left, even if the partition
// came back since), and how many of the subscriptions to id's partition
// here ended so far (parts.ends), in one step.
func (p *parts) servesSince(id string, sub *nats.Subscription) (served bool, ends uint64) {
	q := p.partition(id)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.listed[id] {
		return p.own[id] == sub, 0 // its subscription lasts as long as the worker
	}
	return p.mine[q] == sub, p.ends[q]
}

// ended is how many of the subscriptions to id's partition here ended so
// far.
func (p *parts) ended(id string) uint64 {
	if p.listed[id] {
		return 0
	}
	q := p.partition(id)
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ends[q]
}

// noteMail: id may have mail waiting.
func (p *parts) noteMail(id string) {
	p.mailMu.Lock()
	p.mail[id] = true
	p.mailMu.Unlock()
}

// clearMail: a holder took id: its mail is the holder's.
func (p *parts) clearMail(id string) {
	p.mailMu.Lock()
	delete(p.mail, id)
	p.mailMu.Unlock()
}

// hasMail says whether id may have mail waiting (noteMail).
func (p *parts) hasMail(id string) bool {
	p.mailMu.Lock()
	defer p.mailMu.Unlock()
	return p.mail[id]
}

func (p *parts) subscribe(subj string) (*nats.Subscription, error) {
	s, err := p.nc.Subscribe(subj, p.on)
	if err != nil {
		return nil, fmt.Errorf("worker: subscribe to %s: %w", subj, err)
	}
	// The inboxes bound what is queued; the client must drop nothing.
	if err := s.SetPendingLimits(-1, -1); err != nil {
		_ = s.Unsubscribe()
		return nil, err
	}
	return s, nil
}

// startParts starts a partitioned feed: posts of held ids to their
// inboxes, others' posts as candidates.
func (wk *Worker) startParts(cand chan<- candidate) error {
	nc := handles.Of(wk.w).JS.Conn()
	return wk.parts.start(nc, func(m *nats.Msg) {
		wk.parts.received.Add(1)
		sm, id, err := republished(wk.w.Name, wk.parts.n, m)
		if err == nil && wk.dropRepublished != nil && wk.dropRepublished(sm.Sequence) {
			return
		}
		if err != nil {
			// Not a post of an id (an unroutable subject): fencepostd
			// moves such messages aside (3.6a).
			wk.log.Debug("republished post", "subject", m.Subject, "error", err)
			return
		}
		wk.parts.noteMail(id)
		// Another id's post is kept when it came through the subscription
		// serving its partition here.
		if !wk.route(id, sm, func() {
			if served, ends := wk.parts.servesSince(id, m.Sub); served {
				wk.kept.addSince(id, sm, ends)
			}
		}) {
			// Again: serve may have cleared it since (an idle release)
			// when the holding left before the post could reach it.
			wk.parts.noteMail(id)
			wk.propose(cand, candidate{id, fromPost})
		}
	})
}

// republished is the stored message a republished post carries, and its
// id. The id comes from the subject the server republished to, and the
// stored subject, sequence and time from the server's headers, which come
// after the post's own: a producer that sent a Nats-Sequence or a
// Nats-Subject of its own (the broker stores what it is given) names
// nothing here (TestPartitioned_ForgedHeaders).
func republished(w string, n int, m *nats.Msg) (*jetstream.RawStreamMsg, string, error) {
	id, eid, err := wire.RepublishedID(w, m.Subject, n)
	if err != nil {
		return nil, "", err
	}
	// The stored subject is the id's mailbox: its token is the one the
	// post was republished with (one token per id), compared without
	// building the subject or the stream's name for each post.
	subj := jsapi.LastValue(m.Header, wire.HeaderRepublishSubject)
	tok, ok := wire.MailboxToken(w, subj)
	stream, inWorld := strings.CutPrefix(jsapi.LastValue(m.Header, wire.HeaderRepublishStream), wire.MailboxStream(""))
	if !ok || tok != eid || !inWorld || stream != w {
		return nil, "", fmt.Errorf("worker: a post republished to %q names %q of stream %q", m.Subject, subj, jsapi.LastValue(m.Header, wire.HeaderRepublishStream))
	}
	seq, err := strconv.ParseUint(jsapi.LastValue(m.Header, wire.HeaderRepublishSeq), 10, 64)
	if err != nil {
		return nil, "", fmt.Errorf("worker: republished post without its sequence: %w", err)
	}
	at, _ := time.Parse(time.RFC3339Nano, jsapi.LastValue(m.Header, wire.HeaderRepublishTime))
	return &jetstream.RawStreamMsg{Subject: subj, Sequence: seq, Header: m.Header, Data: m.Data, Time: at}, id, nil
}

// reassign serves the partitions whose first choice this worker is among
// the live nodes; a partition gained is scanned for ids with mail (its
// posts before now reached another worker, or none).
func (wk *Worker) reassign(ctx context.Context) {
	if wk.parts == nil {
		return
	}
	if wk.parts.listed == nil {
		mine := map[int]bool{}
		peers := wk.peers.Load()
		for q := range wk.parts.n {
			if peers == nil || wk.first(partKey(q), *peers) == wk.cfg.Node {
				mine[q] = true
			}
		}
		gained, err := wk.parts.assign(mine)
		if err != nil && ctx.Err() == nil {
			wk.log.Warn("partitions", "error", err)
			wk.missed.Store(true)
		}
		if gained {
			wk.missed.Store(true)
		}
	}
	if wk.parts.reconnected() {
		wk.gapAll()
		wk.missed.Store(true)
	}
}
