package ownership

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/wire"
)

// Records backed by a node lease (docs/contract.md section 5,
// docs/design.md 4.2).
//
// An id claimed through a Session names the session's node lease epoch in
// its record (wire.Record.NodeLease). It is live iff the node lease record
// of its node is held at that epoch and live (wire.Record.LiveBacked), so
// one renewal of the node lease extends every id the node holds, and the
// lapse or release of the node lease frees them all at once.
//
// A takeover is still one conditional write on the id record. One more rule
// keeps a lapsed holder from coming back: before the first takeover of an
// id whose node lease has lapsed but whose node lease record still says
// held, the taker retires that session with a compare-and-swap of the node
// lease record to free (retire). A renewal of the old session that was in
// flight then fails, so the old holder learns it lost everything instead of
// believing a late renewal. A session is retired once; later takeovers of
// its other ids find it free and write only the id record.

// readBacking completes the view of a backed record with its node lease.
// The record of a session known dead before the record was written needs
// no read (deadSessions): it is not backed (nl stays nil), as a read would
// show.
func (s *Store) readBacking(ctx context.Context, v view) (view, error) {
	if s.dead.before(v.rec.Node, v.rec.NodeLease, v.rev) {
		return v, nil
	}
	nv, err := s.readNode(ctx, "read", v.rec.Node)
	if err != nil {
		return view{}, err
	}
	v.nlRead, v.nlLast = true, nv.rev
	if nv.present() {
		v.nl, v.nlRev = &nv.rec, nv.rev
		if !v.rec.BackedBy(v.nl) {
			s.dead.add(v.rec.Node, v.rec.NodeLease, nv.rev)
		}
	}
	return v, nil
}

// deadSessions remembers node lease sessions (node, epoch) seen ended, and
// the node lease revision that showed it (present, and free or at another
// epoch). A record backed by such a session and written before that
// revision is not live, now or later: the record still exists, so the
// bucket was not purged (a reset) since it was written, nor since the
// later revision; without a reset, node lease epochs never go back or
// repeat, so the lease is never again held at that epoch. So its takeover
// needs no read of the node lease and no retire. After a node dies, the
// takeovers of its ids after the first skip a leader read each (the zipf
// scenario: one per id of the victim with mail). A record written after
// that revision (after a reset, the epoch may be a new session's) is read
// as before. Bounded: it forgets everything at deadSessionsMax entries.
type deadSessions struct {
	mu sync.Mutex
	m  map[deadSession]uint64 // -> the node lease revision that showed it
}

type deadSession struct {
	node  string
	epoch uint64
}

const deadSessionsMax = 10_000

// before says whether session (node, epoch) was seen dead at a node lease
// revision after rev.
func (d *deadSessions) before(node string, epoch, rev uint64) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	seen, ok := d.m[deadSession{node, epoch}]
	return ok && rev < seen
}

func (d *deadSessions) add(node string, epoch, rev uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.m == nil || len(d.m) >= deadSessionsMax {
		d.m = map[deadSession]uint64{}
	}
	k := deadSession{node, epoch}
	d.m[k] = max(d.m[k], rev)
}

// expires is when the lease on v lapses: the record's own expiry, or for a
// backed record its node lease's.
func (v view) expires() time.Time {
	if v.rec.BackedBy(v.nl) {
		return v.nl.Expires
	}
	return v.rec.Expires
}

// staleSession reports whether v is backed by a node lease that has lapsed
// at now while its record still says held: a takeover retires it first.
func (v view) staleSession(now time.Time) bool {
	return v.present() && v.rec.BackedBy(v.nl) && (!v.nl.Live(now) || v.overlong(now))
}

// retireThenWrite writes rec over v, first retiring v's lapsed node lease
// session if it has one. A lost retire is errConflict, like a lost write.
func (s *Store) retireThenWrite(ctx context.Context, op, id string, v view, now time.Time, rec wire.Record) (view, error) {
	if v.staleSession(now) {
		if s.beforeWrite != nil {
			s.beforeWrite("retire", id)
		}
		r := *v.nl
		r.State, r.Expires = wire.StateFree, now
		rctx, refused := ctx, func() error { return nil }
		if s.expectRefusal != nil {
			rctx, refused = s.expectRefusal(ctx, wire.KeySubject(s.world, wire.NodeKey(r.Node)))
		}
		nv, err := s.writeNode(rctx, "retire", r.Node, view{rev: v.nlRev, rec: *v.nl}, r)
		if why := refused(); err != nil && why != nil {
			if s.debugOn(ctx) {
				s.debugNode(ctx, "retire", r.Node, "outcome", "refused", "error", why)
			}
			return view{}, &retireRefusedError{node: r.Node, err: why}
		}
		if err != nil {
			return view{}, err
		}
		s.dead.add(v.rec.Node, v.rec.NodeLease, nv.rev)
	}
	return s.write(ctx, op, id, v, rec)
}

// retireRefusedError: the server refused this user the retire of node's
// lapsed lease (WithRefusals). Nothing was written; run reads again.
type retireRefusedError struct {
	node string
	err  error // the refusal
}

func (e *retireRefusedError) Error() string {
	return fmt.Sprintf("ownership: the retire of the lapsed node lease of %q was refused (only fencepostd may retire another node's lease under --auth): %v", e.node, e.err)
}

func (e *retireRefusedError) Unwrap() error { return e.err }

// Refused retires are tried again, each after a fresh read, after pauses
// from retireFirstPause doubling up to retireMaxPause, retireTries times
// in all (about 3 s): fencepostd retires a lapsed lease as soon as it
// lapsed by its clock, so the first read again usually finds it free.
const (
	retireTries      = 40
	retireFirstPause = 2 * time.Millisecond
	retireMaxPause   = 100 * time.Millisecond
)

// readNode fetches node's lease record.
func (s *Store) readNode(ctx context.Context, op, node string) (view, error) {
	s.nodeReads.Add(1)
	key := wire.NodeKey(node)
	m, err := s.last(ctx, wire.KeySubject(s.world, key))
	if errors.Is(err, jsapi.ErrNotFound) {
		if s.debugOn(ctx) {
			s.debugNode(ctx, op, node, "outcome", "absent")
		}
		return view{}, nil
	}
	if err != nil {
		if s.debugOn(ctx) {
			s.debugNode(ctx, op, node, "error", err)
		}
		return view{}, fmt.Errorf("ownership: read node lease of %q: %w", node, err)
	}
	v := view{rev: m.Sequence}
	if jsapi.IsMarker(m.Header) {
		v.tombstone = true
		if s.debugOn(ctx) {
			s.debugNode(ctx, op, node, "outcome", "deleted", "rev", v.rev)
		}
		return v, nil
	}
	if v.rec, err = wire.DecodeRecord(m.Data); err == nil && (v.rec.NodeLease != 0 || v.rec.Node != node && v.rec.State == wire.StateHeld) {
		err = fmt.Errorf("%w: a node lease names node %q and node lease %d", wire.ErrCorruptRecord, v.rec.Node, v.rec.NodeLease)
	}
	if err != nil {
		if s.debugOn(ctx) {
			s.debugNode(ctx, op, node, "error", err, "rev", v.rev)
		}
		return view{}, fmt.Errorf("ownership: node lease of %q at revision %d (key %s): %w; it is left as it is: inspect it, then delete the key or reset the world", node, v.rev, key, err)
	}
	if s.debugOn(ctx) {
		s.debugNode(ctx, op, node, "rev", v.rev, "epoch", v.rec.Epoch, "state", v.rec.State, "expires", v.rec.Expires)
	}
	return v, nil
}

// writeNode stores a node lease record over the view's revision.
func (s *Store) writeNode(ctx context.Context, op, node string, over view, rec wire.Record) (view, error) {
	data, err := wire.EncodeRecord(rec)
	if err != nil {
		return view{}, err
	}
	if s.beforeWrite != nil {
		s.beforeWrite(op, node)
	}
	rev, err := s.kv.Update(ctx, wire.NodeKey(node), data, over.rev)
	if err == nil {
		s.count(op)
		if s.debugOn(ctx) {
			s.debugNode(ctx, op, node, "outcome", "written", "rev", rev, "over", over.rev, "epoch", rec.Epoch, "state", rec.State, "expires", rec.Expires)
		}
		return view{rev: rev, rec: rec}, nil
	}
	if s.debugOn(ctx) {
		s.debugNode(ctx, op, node, "over", over.rev, "error", err)
	}
	return view{}, s.writeErr(op, "node lease of "+node, err)
}

func (s *Store) debugNode(ctx context.Context, op, node string, args ...any) {
	if !s.log.Enabled(ctx, slog.LevelDebug) {
		return
	}
	s.log.LogAttrs(ctx, slog.LevelDebug, "lease "+op, append([]slog.Attr{slog.String("world", s.world), slog.String("node_lease", node)}, attrs(args)...)...)
}

// writeErr classifies a failed conditional write of a node lease like
// write does for an id record: errConflict, a refusal, or unknown.
func (s *Store) writeErr(op, what string, err error) error {
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, jetstream.ErrKeyRevisionMismatch):
		return errConflict
	case errors.As(err, &apiErr), errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrNoStreamResponse):
		return fmt.Errorf("ownership: %s of %s refused by the server: %w", op, what, err)
	default:
		return &UnknownError{Op: op, ID: what, Err: err}
	}
}

// ErrBacked: the id's lease is backed by a node lease, so it is renewed by
// renewing the node lease (its Session), not by itself.
var ErrBacked = errors.New("ownership: backed by a node lease")

// BackedError is Renew's refusal for an id held through a node lease.
type BackedError struct {
	ID        string
	Node      string
	NodeLease uint64
}

func (e *BackedError) Error() string {
	return fmt.Sprintf("ownership: %q is held by node %q through its node lease (epoch %d); it lives as long as that node lease, which the node's session renews", e.ID, e.Node, e.NodeLease)
}

// Is matches ErrBacked.
func (e *BackedError) Is(target error) bool { return target == ErrBacked }

// debugOn reports whether lease reads and writes are logged. Every debug
// call site checks it first, so that with debug logging off no log value is
// boxed or allocated: the cost is this check.
func (s *Store) debugOn(ctx context.Context) bool { return s.log.Enabled(ctx, slog.LevelDebug) }
