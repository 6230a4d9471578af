package daemon

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/world"
)

// Under --auth an owner bound to a node may write only its own node lease
// (docs/security.md, "One identity per node"), so the node that takes over
// an id of a crashed node may not retire the crashed node's lapsed lease,
// which a takeover does first (ownership's retireThenWrite). fencepostd
// does it for them: it follows the world's node leases and, as soon as one
// has lapsed by its clock, writes it free with a compare-and-swap at the
// revision it read. That is the write a taker would have made, with the
// same safety (a renewal in flight is refused; a lease renewed meanwhile
// is left alone), and a takeover then finds the lease free and writes
// only the id's record (docs/design.md section 5, "Under --auth, fencepostd
// retires lapsed node leases").

// nodeLease is a held node lease as the retirer last saw it.
type nodeLease struct {
	rev uint64
	rec wire.Record
}

// retryRetire is how soon a retire that failed for another reason than a
// lost race is tried again.
const retryRetire = time.Second

// retireLate delays each retire past the lapse; tests set it to let a
// taker meet the lapsed lease before fencepostd retired it.
var retireLate time.Duration

// retireLoop runs retireNodes once the world is ready, again after an
// error, until ctx ends.
func (d *Daemon) retireLoop(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case <-d.readyCh:
	}
	for {
		err := d.retireNodes(ctx)
		if ctx.Err() != nil {
			return nil
		}
		d.log.Warn("node lease retirer stopped; restarting", "world", d.cfg.World, "err", err, "in", retryRetire)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(retryRetire):
		}
	}
}

// retireNodes watches the node leases of the world and retires each one
// that lapses.
func (d *Daemon) retireNodes(ctx context.Context) error {
	wd, err := world.Open(ctx, d.js, d.cfg.World)
	if err != nil {
		return err
	}
	own, err := ownership.New(wd, ownership.WithLogger(d.log))
	if err != nil {
		return err
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	replaced := d.bucketReplaced(wctx, wd)
	w, err := handles.Of(wd).KV.Watch(ctx, wire.NodePrefix+"*")
	if err != nil {
		return err
	}
	defer w.Stop()
	leases := map[string]nodeLease{}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	r := retirer{d: d, own: own, maxTerm: wd.Config.MaxTTL + auditMargin, count: d.forgeries()}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-replaced:
			return errBucketReplaced
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("the watch of the node leases ended")
			}
			if e != nil {
				follow(leases, e)
			}
		case <-timer.C:
		}
		next := r.retireLapsed(ctx, leases, time.Now())
		timer.Reset(time.Until(next))
	}
}

// follow keeps the latest held node lease of e's key.
func follow(leases map[string]nodeLease, e jetstream.KeyValueEntry) {
	if e.Operation() != jetstream.KeyValuePut {
		delete(leases, e.Key())
		return
	}
	rec, err := wire.DecodeRecord(e.Value())
	if err != nil || rec.State != wire.StateHeld {
		delete(leases, e.Key()) // free, or not ours to judge (ownership reports it)
		return
	}
	leases[e.Key()] = nodeLease{rev: e.Revision(), rec: rec}
}

// retirer retires the node leases of one world.
type retirer struct {
	d       *Daemon
	own     *ownership.Store
	maxTerm time.Duration // the world's max ttl plus auditMargin
	count   *prometheus.CounterVec
}

// retireLapsed retires every lease lapsed at now, and every lease whose
// expiry lies further than the world's max ttl (plus auditMargin) from
// now, which no honest renewal writes and readers take for lapsed
// (ownership's overlong: a node owner may write its own lease as it
// likes), and returns when the next one lapses.
func (r *retirer) retireLapsed(ctx context.Context, leases map[string]nodeLease, now time.Time) time.Time {
	d, own := r.d, r.own
	next := now.Add(time.Hour)
	for key, l := range leases {
		overlong := r.maxTerm > auditMargin && l.rec.Expires.After(now.Add(r.maxTerm))
		if due := l.rec.Expires.Add(retireLate); now.Before(due) && !overlong {
			if due.Before(next) {
				next = due
			}
			continue
		}
		node, err := wire.DecodeID(strings.TrimPrefix(key, wire.NodePrefix))
		if err != nil {
			delete(leases, key) // names no node: no taker's retire would write it either
			continue
		}
		err = own.RetireNode(ctx, node, l.rev, l.rec, now)
		switch {
		case err == nil && overlong:
			d.log.Warn("forgery: node lease with a term above max_ttl: retired", "world", d.cfg.World, "node", l.rec.Node, "epoch", l.rec.Epoch, "expires", l.rec.Expires, "key", key)
			r.count.WithLabelValues(d.cfg.World, ForgedNodeTerm).Inc()
			delete(leases, key)
		case err == nil:
			d.log.Info("node lease lapsed: retired", "world", d.cfg.World, "node", l.rec.Node, "epoch", l.rec.Epoch, "expired", l.rec.Expires)
			delete(leases, key)
		case errors.Is(err, ownership.ErrContended):
			delete(leases, key) // renewed or retired meanwhile: the watch brings the new one
		default:
			if ctx.Err() == nil {
				d.log.Warn("node lease lapsed: retire failed", "world", d.cfg.World, "node", l.rec.Node, "err", err, "retry_in", retryRetire)
			}
			if retry := now.Add(retryRetire); retry.Before(next) {
				next = retry
			}
		}
	}
	return next
}
