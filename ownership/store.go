package ownership

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/fencing"
	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/world"
)

// Store runs the ownership operations of one world. It is safe for
// concurrent use.
type Store struct {
	world string
	cfg   world.Config
	kv    jetstream.KeyValue
	js    jetstream.JetStream
	skew  time.Duration
	drift float64
	log   *slog.Logger

	metrics Observer
	// expectRefusal, if set, tells of the server's refusal of a retire at
	// once (WithRefusals).
	expectRefusal ExpectRefusal

	// beforeWrite, when set (tests only), runs between the read a decision
	// is made on and the conditional write that carries it out.
	beforeWrite func(op, id string)
	// beforeConfirm, when set (tests only), runs between a read and the
	// barrier that confirms it (confirm).
	beforeConfirm func(id string)
	// writeTwice, when set (tests only), sends each record write once
	// more before the real one, as a client that resent a publish whose
	// first answer it lost: the first is stored, the real one refused.
	writeTwice bool

	cache viewCache
	reads *jsapi.LastReads // Unchanged on a single replica, batched
	dead  deadSessions
	// nodeReads counts node lease reads (tests: NodeReads).
	nodeReads atomic.Int64
	// barriers counts read barriers sent (confirm; tests: Barriers).
	barriers atomic.Int64
}

// New returns the ownership store of an open world.
func New(w *world.World, opts ...Option) (*Store, error) {
	s := &Store{
		world:   w.Name,
		cfg:     w.Config,
		kv:      handles.Of(w).KV,
		js:      handles.Of(w).JS,
		skew:    DefaultMaxSkew,
		drift:   DefaultMaxDrift,
		metrics: nopObserver{},
		log:     slog.Default(),
	}
	for _, o := range opts {
		if err := o(s); err != nil {
			return nil, err
		}
	}
	s.cache.m = make(map[string]view)
	s.reads = jsapi.NewLastReads(s.js.Conn(), wire.BucketStream(s.world))
	return s, nil
}

// World is the name of the store's world.
func (s *Store) World() string { return s.world }

// Config is the world's settings.
func (s *Store) Config() world.Config { return s.cfg }

// view is what one read (or our own last write) showed of an id's record.
type view struct {
	rev       uint64      // last revision of the record subject, 0 if never written
	tombstone bool        // the last entry is a delete/purge marker
	rec       wire.Record // valid when rev > 0 && !tombstone

	// For a record backed by a node lease (rec.NodeLease != 0): that node's
	// lease record as read right after rec (nil when absent or deleted) and
	// its revision. Backed views are never cached (see backing.go).
	nl    *wire.Record
	nlRev uint64
	// nlRead: the node lease was read for this view (not skipped as a
	// known dead session), its last revision then being nlLast (0 when it
	// was never written). A replicated world confirms it with the record
	// (confirm).
	nlRead bool
	nlLast uint64

	// tookOver, on the view a claim or seize wrote: the record it wrote
	// over named a holder (lapsed, or seized from), who may have handed
	// out messages the cursor does not cover (Lease.PriorUntil).
	tookOver bool

	// maxTerm, on a view read from the bucket, is the longest term an
	// honest write gives a lease: the world's max ttl plus MaxTermSlack
	// (0: not bounded, a view of this store's own write). See overlong.
	maxTerm time.Duration
}

// MaxTermSlack is what a lease's expiry may lie beyond the world's max
// ttl from a reader's clock before the reader takes the lease for
// lapsed: the clock skew an honest writer may have, with room to spare
// (fencepostd's auditor allows the same).
const MaxTermSlack = 5 * time.Second

func (v view) present() bool { return v.rev > 0 && !v.tombstone }

// live says whether v's lease is live at now. A lease whose term is
// above the world's bound is not (overlong).
func (v view) live(now time.Time) bool {
	return v.present() && v.rec.LiveBacked(v.nl, now) && !v.overlong(now)
}

// overlong says whether v's lease, held, expires further from now than
// any honest write puts it (the world's max ttl plus MaxTermSlack): its
// own expiry, or for a backed record its node lease's. No claim, renew or
// seize writes such a term (the world refuses ttls above max_ttl); a
// writer who bypasses them (a compromised owner writing the bucket
// directly) does, and so bought the id until its expiry. Readers take it
// for lapsed: it is taken over like any lapsed lease, and its holder's
// fence no longer answers owner (docs/security.md, trust model).
func (v view) overlong(now time.Time) bool {
	if v.maxTerm <= 0 || !v.present() || v.rec.State != wire.StateHeld {
		return false
	}
	limit := now.Add(v.maxTerm)
	if v.rec.Backed() {
		return v.rec.BackedBy(v.nl) && v.nl.Expires.After(limit)
	}
	return v.rec.Expires.After(limit)
}

// maxTerm is the longest term the store takes for honest (overlong).
func (s *Store) maxTerm() time.Duration {
	if s.cfg.MaxTTL <= 0 {
		return 0 // no bound known
	}
	return s.cfg.MaxTTL + MaxTermSlack
}

func (v view) lastEpoch() uint64 {
	if v.present() {
		return v.rec.Epoch
	}
	return 0
}

// nextEpoch is the epoch a claim or seize written over v carries. Over a
// record it is the record's epoch plus one. Over a delete marker the old
// epoch is gone, so it is the marker's revision: every epoch ever written
// was at most the revision of the write that set it (epoch 1 at a revision
// >= 1, epoch e+1 at a later revision than epoch e), and the marker came
// after all of them. See docs/design.md, invariant 2.
func (v view) nextEpoch() uint64 {
	switch {
	case v.present():
		return v.rec.Epoch + 1
	case v.tombstone:
		return v.rev
	default:
		return 1
	}
}

// exhausted is ErrEpochsExhausted when v's record is at the last epoch:
// its next epoch would wrap to 0, which no record may carry and which
// would not fence the holders of earlier epochs.
func (v view) exhausted(what string) error {
	if v.present() && v.rec.Epoch == math.MaxUint64 {
		return fmt.Errorf("%w: %s is at epoch %d, the last one; it cannot be claimed or seized again", ErrEpochsExhausted, what, v.rec.Epoch)
	}
	return nil
}

// last reads the last message of subject in the bucket stream as its
// leader holds it. A single replica answers a direct get from the very
// state every conditional write is checked against (and confirm needs no
// barrier there): the same read, outside the JetStream API queue and
// without its JSON. A replicated stream's direct get may come from a
// follower that lags, so there it is a leader read.
func (s *Store) last(ctx context.Context, subject string) (*jetstream.RawStreamMsg, error) {
	if s.cfg.Replicas <= 1 {
		return jsapi.DirectLast(ctx, s.js.Conn(), wire.BucketStream(s.world), subject)
	}
	return jsapi.LeaderGet(ctx, s.js.Conn(), wire.BucketStream(s.world), jsapi.GetRequest{LastFor: subject})
}

// read fetches the record of id. A record that does not decode is an error
// naming the id, and no operation writes over it.
func (s *Store) read(ctx context.Context, id string) (view, error) {
	m, err := s.last(ctx, wire.RecordSubject(s.world, id))
	if errors.Is(err, jsapi.ErrNotFound) {
		if s.debugOn(ctx) {
			s.debug(ctx, "read", id, "outcome", "absent")
		}
		return view{}, nil
	}
	if err != nil {
		if s.debugOn(ctx) {
			s.debug(ctx, "read", id, "error", err)
		}
		return view{}, fmt.Errorf("ownership: read record of %q: %w", id, err)
	}
	v := view{rev: m.Sequence, maxTerm: s.maxTerm()}
	if jsapi.IsMarker(m.Header) {
		v.tombstone = true
		if s.debugOn(ctx) {
			s.debug(ctx, "read", id, "outcome", "deleted", "rev", v.rev)
		}
		return v, nil
	}
	v.rec, err = wire.DecodeRecord(m.Data)
	if err != nil {
		s.cache.drop(id)
		if s.debugOn(ctx) {
			s.debug(ctx, "read", id, "error", err, "rev", v.rev)
		}
		return view{}, fmt.Errorf("ownership: record of %q at revision %d (key %s): %w; it is left as it is: inspect it, then delete the key or reset the world", id, v.rev, wire.RecordKey(id), err)
	}
	if s.debugOn(ctx) {
		s.debug(ctx, "read", id, "rev", v.rev, "node", v.rec.Node, "epoch", v.rec.Epoch, "state", v.rec.State, "expires", v.rec.Expires, "node_lease", v.rec.NodeLease)
	}
	if v.rec.Backed() {
		s.cache.drop(id)
		return s.readBacking(ctx, v)
	}
	s.cache.put(id, v)
	return v, nil
}

// errConflict means the conditional write lost: the record moved on since
// the view it was based on. Nothing was written.
var errConflict = errors.New("ownership: record changed")

// write stores rec over the view's revision: a create when the subject was
// never written (expected revision 0), a compare-and-swap otherwise.
func (s *Store) write(ctx context.Context, op, id string, over view, rec wire.Record) (view, error) {
	data, err := wire.EncodeRecord(rec)
	if err != nil {
		return view{}, err
	}
	if s.beforeWrite != nil {
		s.beforeWrite(op, id)
	}
	if s.writeTwice {
		_, _ = s.kv.Update(ctx, wire.RecordKey(id), data, over.rev)
	}
	rev, err := s.kv.Update(ctx, wire.RecordKey(id), data, over.rev)
	if err == nil {
		s.count(op)
		v := view{rev: rev, rec: rec}
		if rec.Backed() {
			s.cache.drop(id)
		} else {
			s.cache.put(id, v)
		}
		if s.debugOn(ctx) {
			s.debug(ctx, op, id, "outcome", "written", "rev", rev, "over", over.rev, "node", rec.Node, "epoch", rec.Epoch, "state", rec.State, "node_lease", rec.NodeLease)
		}
		return v, nil
	}
	s.cache.drop(id)
	if s.debugOn(ctx) {
		s.debug(ctx, op, id, "over", over.rev, "error", err)
	}
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, jetstream.ErrKeyRevisionMismatch):
		return view{}, errConflict
	case errors.As(err, &apiErr), errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrNoStreamResponse):
		// The server answered (or nobody received it): nothing was stored.
		return view{}, fmt.Errorf("ownership: %s of %q refused by the server: %w", op, id, err)
	default:
		return view{}, &UnknownError{Op: op, ID: id, Err: err}
	}
}

func (s *Store) debug(ctx context.Context, op, id string, args ...any) {
	if !s.log.Enabled(ctx, slog.LevelDebug) {
		return
	}
	s.log.LogAttrs(ctx, slog.LevelDebug, "lease "+op, append([]slog.Attr{slog.String("world", s.world), slog.String("id", id)}, attrs(args)...)...)
}

func attrs(args []any) []slog.Attr {
	out := make([]slog.Attr, 0, len(args)/2)
	for i := 0; i+1 < len(args); i += 2 {
		out = append(out, slog.Any(args[i].(string), args[i+1]))
	}
	return out
}

// lease builds the holder's view of a record it just wrote. start is taken
// before the write was sent, so the authority is measured from no later
// than the moment the broker stored it.
func (s *Store) lease(id string, v view, start time.Time, ttl time.Duration) *Lease {
	return &Lease{
		Fence:      fencing.Fence{World: s.world, ID: id, Node: v.rec.Node, Epoch: v.rec.Epoch, Revision: v.rev},
		Expires:    v.rec.Expires,
		TTL:        ttl,
		PriorUntil: s.priorUntil(v, start),
		validUntil: s.authority(v.rec.Expires, start),
		rec:        v.rec,
	}
}

// priorUntil is Lease.PriorUntil of a lease won with v, the write having
// been sent at start: the earlier holder stopped handing out messages
// before the record let anyone take the id over, so what it had was
// stored before start, by the stream's clock within the skew bound.
func (s *Store) priorUntil(v view, start time.Time) time.Time {
	if !v.tookOver {
		return time.Time{}
	}
	return start.Add(s.skew)
}

// authority is the local instant until which the writer of a record with
// expiry expires may act, the write having been sent after start: the
// published span less the clock-bound margin delta + 2*rho*span.
func (s *Store) authority(expires, start time.Time) time.Time {
	return authorityOf(expires, start, s.skew, s.drift)
}

func (s *Store) status(id string, v view, now time.Time) Status {
	st := Status{ID: id, Revision: v.rev, Epoch: v.lastEpoch()}
	if v.present() {
		st.Node = v.rec.Node
		if v.live(now) {
			st.Held = true
			st.Expires = v.expires()
		}
	}
	return st
}

// viewCache remembers the last view of each id this store read or wrote, so
// that a holder's renew or release can go straight to the conditional write.
// It only ever chooses which revision a write expects; a stale entry costs
// one failed write and a fresh read, never a wrong outcome.
type viewCache struct {
	mu sync.Mutex
	m  map[string]view
}

const viewCacheCap = 1 << 16

func (c *viewCache) get(id string) (view, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[id]
	return v, ok
}

func (c *viewCache) put(id string, v view) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= viewCacheCap {
		clear(c.m)
	}
	c.m[id] = v
}

func (c *viewCache) drop(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, id)
}

// count records a stored write of op in the store's metrics.
func (s *Store) count(op string) {
	switch op {
	case "claim":
		s.metrics.Claimed(s.world)
	case "seize":
		s.metrics.Seized(s.world)
	case "release":
		s.metrics.Released(s.world)
	case "renew", "node-renew":
		s.metrics.Renewed(s.world)
	}
}
