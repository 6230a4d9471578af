package bench

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/follow"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/world"
)

// ledger checks fencing from the outside, against the broker's own order.
//
// It follows the world's bucket stream, where the ownership records and
// the delivery cursors are subjects of one stream: the stream order is the
// order in which the broker accepted the writes. A cursor write (a commit)
// that moved id's cursor to seq S was accepted while id's record was the
// last record write before it in that order, at epoch E. The drain that
// wrote it delivered S to its handler before committing, and every
// delivery is reported (by the handler, before it returns) with its epoch.
// So a commit is legitimate only if S was delivered under E; a commit
// whose S was delivered only under older epochs is a stale commit: a
// fenced-out owner removed messages. It is checked once every delivery
// report is in (reports and the stream are read independently).
//
// A stale delivery is a handler call under epoch e that started (by the
// handler's clock) after the broker stored a record of a newer epoch for
// the id (by the server's timestamp; both are this machine's clock). That
// is allowed by at-least-once delivery (a paused owner's batch, or a
// forced seize of a live owner, is handed out until the refused commit
// stops it), and is reported, not failed.
//
// In a sharded world (shards > 0) the unit of ownership is the shard: the
// records, epochs and cursors are the shard units' (wire.ShardUnit), and a
// shard's cursor (wire.ShardCursor) covers many ids' messages at once. A
// shard cursor write accepted under the shard record's epoch E is
// legitimate only if every message of the shard it newly covers (covered
// by it, not by the shard's previous stored cursor) was delivered under E
// before the broker stored the write; a message it covers that no handler
// received under E is a stale commit, and one no handler received at all
// is also lost. The ledger learns the messages of each shard from the
// producers' acknowledgements (posted), and checks once every post and
// delivery report is in. Stale deliveries and takeovers are the shard
// unit's: a delivery of any id of the shard under E after the shard's
// record named a newer epoch.
type ledger struct {
	world  string
	shards int // the world's shards; 0: a per-id world

	mu       sync.Mutex
	lastSeq  uint64               // of the bucket stream, processed
	missed   int64                // bucket stream messages gone before the ledger read them
	cur      map[string]recState  // current record per id
	newer    map[string][]epochAt // record writes per id that raised the epoch, in order
	cursor   map[string]uint64    // last cursor per id
	commits  []commit
	byEpoch  []deliveredBy            // stream seq of a mailbox message -> an epoch that delivered it
	more     map[uint64][]deliveredBy // other epochs that delivered the same message
	times    map[idEpoch][]int64      // handler start times (unix nanos) per holding
	measured int64                    // deliveries reported that count (not warm-ups)
	err      error

	// Sharded worlds only.
	where        map[string]idShard       // id -> its shard and token (a cache)
	posts        map[int][]shardPost      // per shard: the messages posted to it, in any order
	shardCursor  map[int]wire.ShardCursor // per shard: the last cursor stored
	shardCommits []shardCommit            // cursor writes that changed a shard's cursor, in stream order
}

type idShard struct {
	q   int
	eid string
}

// shardPost is one message posted to a shard: its stream sequence and its
// id's token.
type shardPost struct {
	seq uint64
	eid string
}

// shardCommit is a write of shard q's cursor (cur) over the one stored
// before it (prev), checked against the shard record the broker held then.
type shardCommit struct {
	q         int
	prev, cur wire.ShardCursor
	epoch     uint64
	held      bool
	at        int64 // the server's timestamp of the write, unix nanos
}

type recState struct {
	epoch uint64
	node  string
	held  bool
}

type epochAt struct {
	epoch uint64
	at    int64 // unix nanos, the server's timestamp of the write
}

type commit struct {
	id    string
	seq   uint64 // the cursor written
	epoch uint64 // of the record the broker checked it against
	held  bool
	at    int64 // the server's timestamp of the write, unix nanos
}

// deliveredBy is the first delivery of a message under an epoch.
type deliveredBy struct {
	epoch uint32
	at    int64 // handler start, unix nanos
}

// clockTolerance is how much later than a commit's server timestamp the
// delivery it covers may be stamped by the handler: both clocks are this
// machine's (an embedded or local server), so only the granularity of the
// two readings. A remote server's clock skew would need more.
const clockTolerance = 2 * time.Millisecond

type idEpoch struct {
	id    string
	epoch uint64
}

func newLedger(worldName string) *ledger {
	return &ledger{
		world:       worldName,
		cur:         map[string]recState{},
		newer:       map[string][]epochAt{},
		cursor:      map[string]uint64{},
		more:        map[uint64][]deliveredBy{},
		times:       map[idEpoch][]int64{},
		where:       map[string]idShard{},
		posts:       map[int][]shardPost{},
		shardCursor: map[int]wire.ShardCursor{},
	}
}

// newShardLedger is the ledger of a world of n shards (0: per-id).
func newShardLedger(worldName string, n int) *ledger {
	l := newLedger(worldName)
	l.shards = n
	return l
}

// shardOf is id's shard and token. l.mu is held; a sharded world only.
func (l *ledger) shardOf(id string) idShard {
	s, ok := l.where[id]
	if !ok {
		eid := wire.EncodeID(id)
		s = idShard{q: wire.Partition(eid, l.shards), eid: eid}
		l.where[id] = s
	}
	return s
}

// unitOf is the unit whose record owns id: the id itself in a per-id
// world, its shard's unit in a sharded one. l.mu is held.
func (l *ledger) unitOf(id string) string {
	if l.shards == 0 {
		return id
	}
	return wire.ShardUnit(l.shardOf(id).q)
}

// unit is unitOf for callers outside the ledger: the key of id's record
// in holders, and of its takeover gaps.
func (l *ledger) unit(id string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.unitOf(id)
}

// posted records that the stream stored a message to id at seq (its
// acknowledgement): a sharded world's check needs every message of a
// shard. A per-id world needs none.
func (l *ledger) posted(id string, seq uint64) {
	if l.shards == 0 || seq == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.shardOf(id)
	l.posts[s.q] = append(l.posts[s.q], shardPost{seq: seq, eid: s.eid})
}

// ledgerHistory is the history per key the bench gives its world's
// bucket: the bucket keeps only the last revision of a key by default, and
// a revision overwritten before the ledger read it would be gone (a claim
// record replaced by a release while the ledger lags: its commits would
// look unauthorised). Retention only: no write is checked differently.
//
// A run that kills the bucket stream's leader keeps clusterLedgerHistory:
// the ledger's consumer stalls for seconds while an id's cursor is
// committed up to 50 times a second.
const (
	ledgerHistory        = 64
	clusterLedgerHistory = 1024
)

// follow consumes the world's bucket stream from its start until ctx ends,
// the stream keeping history revisions per key.
func (l *ledger) follow(ctx context.Context, w *world.World, history int64) error {
	info, err := handles.Of(w).Bucket.Info(ctx)
	if err != nil {
		return fmt.Errorf("bench: bucket stream: %w", err)
	}
	if sc := info.Config; sc.MaxMsgsPerSubject < history {
		sc.MaxMsgsPerSubject = history
		if _, err := handles.Of(w).JS.UpdateStream(ctx, sc); err != nil {
			return fmt.Errorf("bench: keep %d revisions per key in the bucket stream: %w", history, err)
		}
	}
	// In stream order, one message at a time (internal/follow): a
	// record taken after the commits it fenced would make them look
	// stale.
	_, err = follow.Start(ctx, handles.Of(w).Bucket, follow.Options{}, func(m jetstream.Msg, md *jetstream.MsgMetadata, err error) {
		if err != nil {
			return
		}
		subj := m.Subject()
		op := m.Headers().Get(jsapi.HeaderKVOperation)
		switch {
		case strings.HasPrefix(subj, wire.KeySubject(l.world, wire.RecordPrefix)):
			id, err := wire.KeyID(l.world, wire.RecordPrefix, subj)
			if err != nil {
				break
			}
			if op != "" {
				l.record(id, recState{}, md.Timestamp)
				break
			}
			rec, err := wire.DecodeRecord(m.Data())
			if err != nil {
				l.fail(fmt.Errorf("bench: record of %q: %w", id, err))
				break
			}
			l.record(id, recState{epoch: rec.Epoch, node: rec.Node, held: rec.State == wire.StateHeld}, md.Timestamp)
		case strings.HasPrefix(subj, wire.KeySubject(l.world, wire.CursorPrefix)) && op == "":
			id, err := wire.KeyID(l.world, wire.CursorPrefix, subj)
			if err != nil {
				break
			}
			if q, ok := wire.UnitShard(id, l.shards); ok {
				c, err := wire.DecodeShardCursor(m.Data())
				if err != nil {
					l.fail(fmt.Errorf("bench: cursor of shard %d: %w", q, err))
					break
				}
				l.shardCursorWrite(q, c, md.Timestamp)
				break
			}
			c, err := wire.DecodeCursor(m.Data())
			if err != nil {
				l.fail(fmt.Errorf("bench: cursor of %q: %w", id, err))
				break
			}
			l.cursorWrite(id, c.Seq, md.Timestamp)
		}
		l.mu.Lock()
		if seq := md.Sequence.Stream; seq > l.lastSeq+1 {
			l.missed += int64(seq - l.lastSeq - 1)
		}
		l.lastSeq = md.Sequence.Stream
		l.mu.Unlock()
	})
	if err != nil {
		return fmt.Errorf("bench: follow the bucket stream: %w", err)
	}
	return nil // until ctx ends
}

func (l *ledger) fail(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err == nil {
		l.err = err
	}
}

// record is a write of id's ownership record, in stream order.
func (l *ledger) record(id string, r recState, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r.epoch > l.cur[id].epoch {
		l.newer[id] = append(l.newer[id], epochAt{r.epoch, at.UnixNano()})
	}
	l.cur[id] = r
}

// cursorWrite is a commit of id's cursor to seq, in stream order: checked
// against the record the broker held at that point.
func (l *ledger) cursorWrite(id string, seq uint64, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if seq <= l.cursor[id] {
		return // a failure count, not a move of the cursor
	}
	l.cursor[id] = seq
	r := l.cur[id]
	l.commits = append(l.commits, commit{id: id, seq: seq, epoch: r.epoch, held: r.held, at: at.UnixNano()})
}

// shardCursorWrite is a write of shard q's cursor, in stream order: kept
// with the cursor it replaced and the shard record the broker held at that
// point, to be checked once every post and delivery is known. A write
// that changes nothing is not a commit.
func (l *ledger) shardCursorWrite(q int, c wire.ShardCursor, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	prev := l.shardCursor[q]
	if c.Seq == prev.Seq && maps.Equal(c.Pending, prev.Pending) {
		return
	}
	l.shardCursor[q] = c
	r := l.cur[wire.ShardUnit(q)]
	l.shardCommits = append(l.shardCommits, shardCommit{q: q, prev: prev, cur: c, epoch: r.epoch, held: r.held, at: at.UnixNano()})
}

// delivery is a handler call for id's message at stream sequence seq,
// under epoch, that started at (unix nanos). counted: a measured message
// (not a warm-up).
func (l *ledger) delivery(id string, seq, epoch uint64, at int64, counted bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if seq >= uint64(len(l.byEpoch)) {
		l.byEpoch = grow(l.byEpoch, seq)
	}
	switch e := uint32(epoch); {
	case l.byEpoch[seq].epoch == 0:
		l.byEpoch[seq] = deliveredBy{e, at}
	case l.byEpoch[seq].epoch == e:
		l.byEpoch[seq].at = min(l.byEpoch[seq].at, at)
	default:
		found := false
		for i, o := range l.more[seq] {
			if o.epoch == e {
				found = true
				l.more[seq][i].at = min(o.at, at)
			}
		}
		if !found {
			l.more[seq] = append(l.more[seq], deliveredBy{e, at})
		}
	}
	k := idEpoch{l.unitOf(id), epoch}
	l.times[k] = append(l.times[k], at)
	if counted {
		l.measured++
	}
}

// holders is the current record of every id (every shard unit, in a
// sharded world: unit says which is an id's).
func (l *ledger) holders() map[string]recState {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]recState, len(l.cur))
	for id, r := range l.cur {
		out[id] = r
	}
	return out
}

// caughtUp waits until the ledger processed the bucket stream up to its
// last message at the time of the call.
func (l *ledger) caughtUp(ctx context.Context, w *world.World) error {
	info, err := handles.Of(w).Bucket.Info(ctx)
	if err != nil {
		return err
	}
	last := info.State.LastSeq
	return pollUntil(ctx, 30*time.Second, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.lastSeq >= last
	})
}

// verdict is what the ledger found.
type verdict struct {
	staleCommits, commits           int64
	staleDeliveries, deliveries     int64
	staleCommitExamples             []string
	measuredDeliveries, takeoverIDs int64
	missed                          int64 // bucket writes the ledger never saw
	writes                          int64 // bucket writes in all (stream sequence)
}

// check runs the checks; call it once every delivery report is in and the
// ledger caught up with the bucket stream.
func (l *ledger) check() (verdict, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var v verdict
	for _, c := range l.commits {
		v.commits++
		by := l.deliveries(c.seq)
		ok := false
		for _, d := range by {
			// Delivered under the record's epoch before the broker stored
			// the commit.
			ok = ok || (c.held && d.epoch == uint32(c.epoch) && d.at <= c.at+int64(clockTolerance))
		}
		if !ok {
			v.staleCommits++
			if len(v.staleCommitExamples) < 5 {
				v.staleCommitExamples = append(v.staleCommitExamples, fmt.Sprintf("%q cursor %d accepted under epoch %d (held %v) at %d, delivered (epoch, at) %v", c.id, c.seq, c.epoch, c.held, c.at, by))
			}
		}
	}
	l.checkShards(&v)
	for k, ts := range l.times {
		v.deliveries += int64(len(ts))
		var since int64 // when a newer epoch than k.epoch was stored
		for _, n := range l.newer[k.id] {
			if n.epoch > k.epoch {
				since = n.at
				break
			}
		}
		if since == 0 {
			continue
		}
		for _, t := range ts {
			if t > since {
				v.staleDeliveries++
			}
		}
	}
	v.measuredDeliveries = l.measured
	v.missed = l.missed
	v.writes = int64(l.lastSeq)
	for _, n := range l.newer {
		if len(n) > 1 {
			v.takeoverIDs++
		}
	}
	return v, l.err
}

// explainLoss says what the bucket stream shows of message n of id, lost
// (posted, never delivered) at mailbox stream sequence seq (0: unknown):
// whether a commit of the id's cursor passed it, so that it was committed
// without a delivery (a read that skipped it), with the commit's epoch and
// the cursor before it; or whether no commit reached it, so that something
// removed it that no cursor covered (a purge below an uncommitted
// message). Call it once the ledger caught up.
func (l *ledger) explainLoss(id string, n, seq uint64) string {
	what := fmt.Sprintf("%q message %d at mailbox sequence %d: ", id, n, seq)
	if seq == 0 {
		return what + "its sequence is unknown (the sender did not say)"
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.shards > 0 {
		return what + l.explainShardLoss(id, seq)
	}
	var from uint64 // the id's cursor before the commit that passed seq
	for _, c := range l.commits {
		if c.id != id {
			continue
		}
		if c.seq < seq {
			from = c.seq
			continue
		}
		what += fmt.Sprintf("committed without a delivery: the cursor moved from %d to %d under epoch %d (held %v) at %s", from, c.seq, c.epoch, c.held, time.Unix(0, c.at).UTC().Format("15:04:05.000"))
		return what + l.deliveredAt(seq)
	}
	what += fmt.Sprintf("removed with no commit covering it: the id's cursor reached %d only", from)
	return what + l.deliveredAt(seq)
}

// deliveries are the first deliveries of the message at seq under each
// epoch that delivered it. l.mu is held.
func (l *ledger) deliveries(seq uint64) []deliveredBy {
	var by []deliveredBy
	if seq < uint64(len(l.byEpoch)) && l.byEpoch[seq].epoch != 0 {
		by = append(by, l.byEpoch[seq])
	}
	return append(by, l.more[seq]...)
}

// deliveredAt says which epochs the ledger saw deliver the message at
// seq, if any (a lost message has none: else the bench's own count and the
// ledger disagree). l.mu is held.
func (l *ledger) deliveredAt(seq uint64) string {
	by := l.deliveries(seq)
	if len(by) == 0 {
		return ""
	}
	return fmt.Sprintf("; yet delivery reports name it (epoch, at): %v", by)
}

// pollUntil polls cond every 10 ms until it holds, ctx ends or d passes.
func pollUntil(ctx context.Context, d time.Duration, cond func() bool) error {
	deadline := time.Now().Add(d)
	for !cond() {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: condition not met within %v", d)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// unrecordedPosts is how many of seqs (the stream sequences of the
// messages the producers had acknowledged) have no post in a sharded
// world's ledger: checkShards checks only the messages it knows, so one
// it missed would go unchecked. 0 for a per-id world.
func (l *ledger) unrecordedPosts(seqs []uint64) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.shards == 0 {
		return 0
	}
	var known []uint64 // a sorted slice, not a map: a full-size run has millions
	for _, ps := range l.posts {
		for _, p := range ps {
			known = append(known, p.seq)
		}
	}
	slices.Sort(known)
	n := 0
	for _, seq := range seqs {
		if _, ok := slices.BinarySearch(known, seq); !ok {
			n++
		}
	}
	return n
}

// checkShards checks every shard cursor write (see ledger): each message
// it newly covers must have been delivered under the epoch of the shard's
// record the write was accepted under, before the write. l.mu is held.
func (l *ledger) checkShards(v *verdict) {
	if l.shards == 0 {
		return
	}
	sorted := map[int][]shardPost{}
	byEID := map[int]map[string][]uint64{}
	for q, ps := range l.posts {
		ps = slices.Clone(ps)
		slices.SortFunc(ps, func(a, b shardPost) int { return cmp.Compare(a.seq, b.seq) })
		ps = slices.CompactFunc(ps, func(a, b shardPost) bool { return a.seq == b.seq }) // a resent post: one message
		sorted[q] = ps
		ids := map[string][]uint64{}
		for _, p := range ps {
			ids[p.eid] = append(ids[p.eid], p.seq)
		}
		byEID[q] = ids
	}
	for _, c := range l.shardCommits {
		v.commits++
		bad, n := shardPost{}, 0
		for _, p := range newlyCovered(c, sorted[c.q], byEID[c.q]) {
			if !l.deliveredUnder(p.seq, c) {
				if n == 0 {
					bad = p
				}
				n++
			}
		}
		if n == 0 {
			continue
		}
		v.staleCommits++
		if len(v.staleCommitExamples) < 5 {
			id, _ := wire.DecodeID(bad.eid)
			by := l.deliveries(bad.seq)
			what := "never delivered"
			if len(by) > 0 {
				what = fmt.Sprintf("delivered (epoch, at) %v", by)
			}
			v.staleCommitExamples = append(v.staleCommitExamples, fmt.Sprintf("shard %d cursor %s (over %s) accepted under epoch %d (held %v) at %d covers %d message(s) not delivered under that epoch before it: %q at mailbox sequence %d %s",
				c.q, cursorText(c.cur), cursorText(c.prev), c.epoch, c.held, c.at, n, id, bad.seq, what))
		}
	}
}

// newlyCovered are the messages of c's shard (ps: sorted by sequence;
// byEID: their sequences per id token, sorted) that c.cur covers and
// c.prev did not.
func newlyCovered(c shardCommit, ps []shardPost, byEID map[string][]uint64) []shardPost {
	var out []shardPost
	// Above the previous mark: every message up to the new mark that the
	// new cursor does not except.
	i, _ := slices.BinarySearchFunc(ps, c.prev.Seq+1, func(p shardPost, seq uint64) int { return cmp.Compare(p.seq, seq) })
	for ; i < len(ps) && ps[i].seq <= c.cur.Seq; i++ {
		if c.cur.Committed(ps[i].eid, ps[i].seq) {
			out = append(out, ps[i])
		}
	}
	// At or below it: the messages the previous cursor excepted.
	for eid, p := range c.prev.Pending {
		seqs := byEID[eid]
		j, _ := slices.BinarySearch(seqs, p.Seq)
		for ; j < len(seqs) && seqs[j] <= c.prev.Seq; j++ {
			if c.cur.Committed(eid, seqs[j]) {
				out = append(out, shardPost{seq: seqs[j], eid: eid})
			}
		}
	}
	return out
}

// deliveredUnder says whether the message at seq was delivered under the
// epoch of the record c was accepted under, before c was stored. l.mu is
// held.
func (l *ledger) deliveredUnder(seq uint64, c shardCommit) bool {
	if !c.held {
		return false
	}
	for _, d := range l.deliveries(seq) {
		if d.epoch == uint32(c.epoch) && d.at <= c.at+int64(clockTolerance) {
			return true
		}
	}
	return false
}

// explainShardLoss is explainLoss in a sharded world: the first write of
// the id's shard cursor that covered the message, or that none did. l.mu
// is held.
func (l *ledger) explainShardLoss(id string, seq uint64) string {
	s := l.shardOf(id)
	for _, c := range l.shardCommits {
		if c.q != s.q || !c.cur.Committed(s.eid, seq) {
			continue
		}
		return fmt.Sprintf("committed without a delivery: shard %d's cursor moved from %s to %s under epoch %d (held %v) at %s", s.q, cursorText(c.prev), cursorText(c.cur), c.epoch, c.held, time.Unix(0, c.at).UTC().Format("15:04:05.000")) + l.deliveredAt(seq)
	}
	return fmt.Sprintf("removed with no commit covering it: shard %d's cursor reached %s only", s.q, cursorText(l.shardCursor[s.q])) + l.deliveredAt(seq)
}

// cursorText is a shard cursor in a few words: its mark and its pending
// ids' first sequences.
func cursorText(c wire.ShardCursor) string {
	if len(c.Pending) == 0 {
		return fmt.Sprintf("%d", c.Seq)
	}
	eids := slices.Sorted(maps.Keys(c.Pending))
	parts := make([]string, 0, len(eids))
	for _, eid := range eids {
		id, _ := wire.DecodeID(eid)
		parts = append(parts, fmt.Sprintf("%q from %d", id, c.Pending[eid].Seq))
	}
	return fmt.Sprintf("%d except %s", c.Seq, strings.Join(parts, ", "))
}
