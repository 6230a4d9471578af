package daemon

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/world"
)

// The auditor: what subject permissions cannot refuse an owner, fencepostd
// sees in the bucket stream and undoes (docs/security.md, trust model).
// Owners may write any record o.<id> and any drain lock l.<id>, with any
// content and without the revision condition: the server checks the
// subject, never the payload. fencepostd --auth follows the world's
// records and locks (one watch, the bucket is ordered) and, for each
// write no honest owner makes:
//
//   - a held record whose term (expires less the time the server stored
//     it) is above the world's max_ttl: honest records are written for a
//     ttl within the world's bounds. It is freed, at the highest epoch the
//     id had, with a compare-and-swap at the forged revision: the id is
//     lapsed, as a reader should have judged it;
//   - a record whose epoch is below the highest the id had since
//     fencepostd started or the world was last reset (epochs never go
//     back, docs/contract.md section 1): freed likewise, so that the next claim gets a
//     new epoch above every earlier one;
//   - a drain lock whose term is above the world's max_ttl: deleted at its
//     revision, so the holder's drains are no longer refused as contended.
//
// Each is logged at WARN with the key and counted in
// fencepost_forgeries_total{world,kind}. A write by an owner that is not
// the holder but looks like an honest one (a release of another node's id
// at the current revision, a cursor within the mailbox) is not
// detectable here: the stored message does not say who published it.

// Kinds of forgery the auditor detects.
const (
	ForgedRecordTerm = "record_term" // held record with a term above max_ttl
	ForgedEpochBack  = "epoch_back"  // record whose epoch went back
	ForgedLockTerm   = "lock_term"   // drain lock with a term above max_ttl
	ForgedNodeTerm   = "node_term"   // node lease with a term above max_ttl (retired by the retirer)
)

// auditMargin is what the auditor allows above max_ttl for the clock
// difference between a writer and the server (fencepost's skew bound is
// 100 ms): a term within max_ttl + auditMargin is honest.
const auditMargin = 5 * time.Second

// forgeries counts what the auditor detected, on the registry /metrics
// serves when it takes registrations.
func (d *Daemon) forgeries() *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fencepost_forgeries_total",
		Help: "Writes of the bucket no honest owner makes (kind: record_term, epoch_back, lock_term, node_term, consumer_at_rest), detected and undone by fencepostd --auth; a WARN names each key (docs/security.md).",
	}, []string{"world", "kind"})
	reg, ok := d.gather.(prometheus.Registerer)
	if !ok {
		return c
	}
	if err := reg.Register(c); err != nil {
		if are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
			if existing, ok := are.ExistingCollector.(*prometheus.CounterVec); ok {
				return existing
			}
		}
	}
	return c
}

// auditor is the state of one watch of the bucket.
type auditor struct {
	d      *Daemon
	kv     jetstream.KeyValue
	own    *ownership.Store // its record writes
	maxTTL time.Duration
	epochs map[string]uint64 // record key -> the highest epoch seen
	count  *prometheus.CounterVec
}

// auditLoop runs audit once the world is ready, again after an error,
// until ctx ends.
func (d *Daemon) auditLoop(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case <-d.readyCh:
	}
	count := d.forgeries()
	for {
		err := d.audit(ctx, count)
		if ctx.Err() != nil {
			return nil
		}
		d.log.Warn("auditor stopped; restarting", "world", d.cfg.World, "err", err, "in", retryRetire)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(retryRetire):
		}
	}
}

func (d *Daemon) audit(ctx context.Context, count *prometheus.CounterVec) error {
	w, err := world.Open(ctx, d.js, d.cfg.World)
	if err != nil {
		return err
	}
	own, err := ownership.New(w, ownership.WithLogger(d.log))
	if err != nil {
		return err
	}
	a := &auditor{d: d, kv: handles.Of(w).KV, own: own, maxTTL: w.Config.MaxTTL, epochs: map[string]uint64{}, count: count}
	watch, err := handles.Of(w).KV.WatchFiltered(ctx, []string{wire.RecordPrefix + "*", wire.LockPrefix + "*", wire.WorldKey})
	if err != nil {
		return err
	}
	defer watch.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-watch.Updates():
			if !ok {
				return errors.New("the watch of the bucket ended")
			}
			if e != nil {
				if err := a.check(ctx, e); err != nil {
					return err
				}
			}
		}
	}
}

// check judges one entry of the bucket.
func (a *auditor) check(ctx context.Context, e jetstream.KeyValueEntry) error {
	key := e.Key()
	switch {
	case key == wire.WorldKey:
		// Written by world add and reset: a reset starts epochs again,
		// and the settings may have changed.
		w, err := world.Open(ctx, a.d.js, a.d.cfg.World)
		if err != nil {
			return err
		}
		a.maxTTL, a.epochs = w.Config.MaxTTL, map[string]uint64{}
	case e.Operation() != jetstream.KeyValuePut:
	case strings.HasPrefix(key, wire.RecordPrefix):
		a.record(ctx, e)
	case strings.HasPrefix(key, wire.LockPrefix):
		a.lock(ctx, e)
	}
	return nil
}

func (a *auditor) record(ctx context.Context, e jetstream.KeyValueEntry) {
	rec, err := wire.DecodeRecord(e.Value())
	if err != nil {
		return // ownership refuses it itself (fails closed)
	}
	high := a.epochs[e.Key()]
	var kind string
	switch {
	case rec.Epoch < high:
		kind = ForgedEpochBack
	case rec.State == wire.StateHeld && rec.Expires.Sub(e.Created()) > a.maxTTL+auditMargin:
		kind = ForgedRecordTerm
	}
	a.epochs[e.Key()] = max(high, rec.Epoch)
	if kind == "" {
		return
	}
	epoch := max(high, rec.Epoch)
	id, err := wire.DecodeID(strings.TrimPrefix(e.Key(), wire.RecordPrefix))
	if err == nil {
		err = a.own.FreeForged(ctx, id, e.Revision(), rec, epoch, e.Created())
	}
	a.report(kind, e, err, "node", rec.Node, "epoch", rec.Epoch, "highest_epoch", high, "expires", rec.Expires, "freed_at_epoch", epoch)
}

func (a *auditor) lock(ctx context.Context, e jetstream.KeyValueEntry) {
	l, err := wire.DecodeLock(e.Value())
	if err != nil || l.Expires.Sub(e.Created()) <= a.maxTTL+auditMargin {
		return
	}
	err = a.kv.Delete(ctx, e.Key(), jetstream.LastRevision(e.Revision()))
	a.report(ForgedLockTerm, e, err, "node", l.Node, "epoch", l.Epoch, "expires", l.Expires)
}

// report logs and counts a forgery and what was done about it.
func (a *auditor) report(kind string, e jetstream.KeyValueEntry, undo error, args ...any) {
	a.count.WithLabelValues(a.d.cfg.World, kind).Inc()
	args = append([]any{"world", a.d.cfg.World, "kind", kind, "key", e.Key(), "revision", e.Revision(), "stored", e.Created(), "max_ttl", a.maxTTL}, args...)
	switch {
	case undo == nil:
		a.d.log.Warn("forgery detected in the bucket: undone", args...)
	case errors.Is(undo, jetstream.ErrKeyRevisionMismatch), errors.Is(undo, ownership.ErrContended):
		a.d.log.Warn("forgery detected in the bucket: written over meanwhile", args...)
	default:
		a.d.log.Warn("forgery detected in the bucket: could not undo it", append(args, "err", undo)...)
	}
}

// ForgedConsumer is the kind of a consumer kept at rest on a world's
// stream: without an inactivity threshold (a durable one), or with one
// above the world's max_ttl and consumerIdle, whichever is longer.
// fencepost makes none such (docs/wire.md: no consumer exists at rest);
// an owner may (it creates consumers to drain), and one would read every
// message of a mailbox as it comes, for ever.
const ForgedConsumer = "consumer_at_rest"

// consumerIdle is the longest inactivity threshold fencepost's own
// consumers may have whatever the world's max_ttl: nats.go's ordered
// consumers (watches) ask for 5 minutes.
const consumerIdle = 15 * time.Minute

// consumerSweep is how often the auditor lists the world's consumers, for
// one whose creation advisory it missed.
const consumerSweep = time.Minute

// reapLoop removes the consumers at rest of the world's two streams: at
// each creation advisory, and every consumerSweep.
func (d *Daemon) reapLoop(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case <-d.readyCh:
	}
	count := d.forgeries()
	streams := []string{wire.MailboxStream(d.cfg.World), wire.BucketStream(d.cfg.World)}
	created := make(chan string, 64)
	sub, err := d.nc.Subscribe("$JS.EVENT.ADVISORY.CONSUMER.CREATED.*.*", func(m *nats.Msg) {
		select {
		case created <- m.Subject:
		default: // the sweep finds it
		}
	})
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	t := time.NewTicker(consumerSweep)
	defer t.Stop()
	maxTTL := d.reapAll(ctx, count, streams, 0)
	for {
		select {
		case <-ctx.Done():
			return nil
		case subj := <-created:
			toks := strings.Split(subj, ".")
			stream, name := toks[len(toks)-2], toks[len(toks)-1]
			for _, s := range streams {
				if s == stream {
					d.reap(ctx, count, s, name, maxTTL)
				}
			}
		case <-t.C:
			maxTTL = d.reapAll(ctx, count, streams, maxTTL)
		}
	}
}

// reapAll reaps every consumer of streams and returns the world's
// max_ttl (maxTTL when the world cannot be read).
func (d *Daemon) reapAll(ctx context.Context, count *prometheus.CounterVec, streams []string, maxTTL time.Duration) time.Duration {
	if w, err := world.Open(ctx, d.js, d.cfg.World); err == nil {
		maxTTL = w.Config.MaxTTL
	}
	if maxTTL == 0 {
		return 0
	}
	for _, s := range streams {
		st, err := d.js.Stream(ctx, s)
		if err != nil {
			continue
		}
		names := st.ConsumerNames(ctx)
		for name := range names.Name() {
			d.reap(ctx, count, s, name, maxTTL)
		}
	}
	return maxTTL
}

// reap deletes stream's consumer name if it is kept at rest: no
// inactivity threshold, or one too long (maxTTL 0: not known yet).
func (d *Daemon) reap(ctx context.Context, count *prometheus.CounterVec, stream, name string, maxTTL time.Duration) {
	if maxTTL == 0 {
		return
	}
	c, err := d.js.Consumer(ctx, stream, name)
	if err != nil {
		return
	}
	cfg := c.CachedInfo().Config
	if cfg.InactiveThreshold > 0 && cfg.InactiveThreshold <= max(maxTTL, consumerIdle)+auditMargin {
		return
	}
	err = d.js.DeleteConsumer(ctx, stream, name)
	count.WithLabelValues(d.cfg.World, ForgedConsumer).Inc()
	args := []any{"world", d.cfg.World, "kind", ForgedConsumer, "stream", stream, "consumer", name, "durable", cfg.Durable, "inactive_threshold", cfg.InactiveThreshold, "filter", cfg.FilterSubject, "filters", cfg.FilterSubjects}
	if err != nil {
		d.log.Warn("consumer kept at rest on a world's stream: could not remove it", append(args, "err", err)...)
		return
	}
	d.log.Warn("consumer kept at rest on a world's stream: removed", args...)
}
