package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/wire"
)

// Atomic batches in flight (docs/security.md, "Atomic
// batches"). A stateful commit is one atomic batch on the world's bucket
// (design 3.12), and JetStream keeps at most 50 batches open per stream
// (1,000 per server) from a batch's first message to its commit, dropping
// one whose next message does not come within 10 s. Whoever may write a
// key of the bucket may open batches without committing them: 50 of them,
// refreshed, refuse every stateful commit of the world (10210 "too many
// inflight"). The server counts them per stream, not per user, so
// fencepostd cannot refuse them; it bounds nothing more than the server
// does, and it detects them: it commits a batch of its own on the barrier
// key every batchProbe and, when the server refuses it for the slots,
// counts fencepost_batch_slots_exhausted_total{world} and logs a WARN;
// and it counts every batch the server abandons
// (fencepost_batches_abandoned_total{world,reason}: an honest commit is
// sent at once, so an abandoned batch is a client that died in the
// middle of one, or an attacker's).

// batchProbe is how often fencepostd commits its probe batch.
var batchProbe = 5 * time.Second

// jsErrTooManyInflight is JetStream's refusal of a batch beyond the open
// batches a stream or the server allows.
const jsErrTooManyInflight = 10210

// batchLoop probes the bucket's batch slots and counts abandoned batches,
// once the world is ready.
func (d *Daemon) batchLoop(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case <-d.readyCh:
	}
	exhausted, abandoned := d.batchMetrics()
	var (
		mu       sync.Mutex
		lastWarn time.Time
	)
	warn := func(msg string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if time.Since(lastWarn) < time.Minute {
			return
		}
		lastWarn = time.Now()
		d.log.Warn(msg, append([]any{"world", d.cfg.World}, args...)...)
	}
	sub, err := d.nc.Subscribe("$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED."+wire.BucketStream(d.cfg.World), func(m *nats.Msg) {
		var adv struct {
			Reason string `json:"reason"`
		}
		_ = json.Unmarshal(m.Data, &adv)
		abandoned.WithLabelValues(d.cfg.World, adv.Reason).Inc()
		warn("atomic batches abandoned on the world's bucket: a client that died in the middle of a commit, or one opening batches it never commits (docs/security.md, Atomic batches)", "reason", adv.Reason)
	})
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	t := time.NewTicker(batchProbe)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		// A batch of one message, its commit, that expects the barrier
		// key at a sequence it never has: the stream stores nothing
		// (10071), unless every batch slot is taken, which it checks
		// first (10210).
		m := nats.NewMsg(wire.BarrierSubject(d.cfg.World))
		m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, fmt.Sprint(uint64(math.MaxInt64)))
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := jsapi.PublishBatch(pctx, d.js, []*nats.Msg{m})
		cancel()
		var apiErr *jetstream.APIError
		switch {
		case errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrTooManyInflight:
			exhausted.WithLabelValues(d.cfg.World).Inc()
			warn("every atomic batch slot of the world's bucket is taken: stateful commits are refused (10210) until the batches are committed or dropped (10 s after their last message); a client opens batches it never commits (docs/security.md, Atomic batches)")
		case errors.Is(err, jsapi.ErrAtomicDisabled):
			return nil // a world made before per-id state: no batches to take
		}
	}
}

// batchMetrics are the batch counters, on the registry /metrics serves.
func (d *Daemon) batchMetrics() (exhausted, abandoned *prometheus.CounterVec) {
	exhausted = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fencepost_batch_slots_exhausted_total",
		Help: "Probes of fencepostd --auth refused because every atomic batch slot of the world's bucket was taken (stateful commits were refused meanwhile); docs/security.md.",
	}, []string{"world"})
	abandoned = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fencepost_batches_abandoned_total",
		Help: "Atomic batches on the world's bucket the server abandoned (reason: timeout, incomplete, ...): a client that died in the middle of a commit, or batches opened and never committed; docs/security.md.",
	}, []string{"world", "reason"})
	if reg, ok := d.gather.(prometheus.Registerer); ok {
		for _, c := range []**prometheus.CounterVec{&exhausted, &abandoned} {
			if err := reg.Register(*c); err != nil {
				if are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
					if existing, ok := are.ExistingCollector.(*prometheus.CounterVec); ok {
						*c = existing
					}
				}
			}
		}
	}
	return exhausted, abandoned
}
