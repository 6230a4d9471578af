package daemon

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/metrics"
	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/world"
)

// ensureWorld makes the configured world ready: it opens it, or creates it
// with the configured replicas, retrying with backoff while JetStream is not
// there yet (a cluster member waiting for the others). Then it waits for
// the stop.
func (d *Daemon) ensureWorld(ctx context.Context) error {
	name, replicas := d.cfg.World, d.cfg.replicas()
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
		err := d.openOrCreate(ctx, name, replicas)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		d.log.Warn("world not ready yet; retrying", "world", name, "replicas", replicas, "err", err, "retry_in", wait)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
	d.worldReady.Store(true)
	close(d.readyCh)
	d.log.Info("fencepostd ready", "world", name, "url", d.ClientURL(), "http", d.HTTPAddr())
	<-ctx.Done()
	return nil
}

// mailboxShare is the max_bytes of the world fencepostd --auth creates at
// replicas, under the store account's storage limit store: seven eighths
// of it, the rest for the bucket (records, cursors, locks, leases, state),
// whose writes stop when the account is full. The account's limit counts
// every replica (nats-server reserves max_bytes times the replicas of an
// account without tiers), so a replicated world's share is divided by its
// replicas: a 3-member cluster refused the undivided one as "insufficient
// storage resources" and never made its world ready (TestAuth_Cluster).
func mailboxShare(store int64, replicas int) int64 {
	return (store - store/8) / int64(max(replicas, 1))
}

func (d *Daemon) openOrCreate(ctx context.Context, name string, replicas int) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second) // short: a cluster without a meta leader does not answer
	defer cancel()
	w, err := world.Open(ctx, d.js, name)
	if err == nil {
		if w.Config.Replicas != replicas && d.cfg.Replicas != 0 {
			d.log.Warn("world exists with other replicas; keeping them", "world", name, "replicas", w.Config.Replicas, "configured", replicas)
		}
		if d.cfg.Shards != 0 && w.Config.Shards != d.cfg.Shards {
			d.log.Warn("world exists with other shards; keeping them (a world's kind is fixed when it is created)", "world", name, "kind", w.Config.Kind(), "shards", w.Config.Shards, "configured", d.cfg.Shards)
		}
		if d.cfg.Partitions != 0 && w.Config.Partitions != d.cfg.partitions() {
			d.log.Warn("world exists with other partitions; keeping them", "world", name, "partitions", w.Config.Partitions, "configured", d.cfg.partitions())
		}
		if d.cfg.Auth && w.Config.Purge != world.PurgeByServer {
			d.log.Warn("world has purge=owner, but owners may not purge with --auth: its committed messages stay until an operator purges them; recreate it with purge=server", "world", name)
		}
		if store := d.cfg.AuthMaxStore; d.cfg.Auth && store > 0 && (w.Config.MaxBytes <= 0 || w.Config.MaxBytes*int64(max(w.Config.Replicas, 1)) >= int64(store)) {
			d.log.Warn("auth: the world's mailboxes may fill the whole store (auth_max_store): producers could then stop every commit, claim and renewal; give the world max_bytes below it (fencepost world add with --max-bytes; docs/security.md, Storage)", "world", name, "max_bytes", w.Config.MaxBytes, "replicas", w.Config.Replicas, "auth_max_store", store, "suggested_max_bytes", mailboxShare(int64(store), w.Config.Replicas))
		}
		// A world made before the settings entry existed gets it now:
		// producers under --auth open the world from it.
		if err := world.PublishSettings(ctx, w); err != nil {
			if d.cfg.Auth {
				return err
			}
			d.log.Warn("could not write the world's settings entry; producers that may not read its streams cannot open it", "world", name, "err", err)
		}
		return nil
	}
	if !errors.Is(err, world.ErrUnknownWorld) {
		return err
	}
	cfg := world.Config{Replicas: replicas, Partitions: d.cfg.partitions(), Shards: d.cfg.Shards}
	if d.cfg.Auth {
		// Owners may not purge: the server removes what they commit.
		cfg.Purge = world.PurgeByServer
		// The mailboxes may not fill the whole store: records, cursors
		// and leases keep room, so that producers cannot stop commits.
		if d.cfg.AuthMaxStore > 0 {
			cfg.MaxBytes = mailboxShare(int64(d.cfg.AuthMaxStore), replicas)
		}
	}
	_, err = world.Create(ctx, d.js, name, cfg)
	if errors.Is(err, world.ErrWorldExists) {
		return nil // another member created it first
	}
	if err == nil {
		d.log.Info("world created", "world", name, "replicas", replicas, "partitions", cfg.Partitions, "kind", cfg.Kind(), "shards", cfg.Shards)
	}
	return err
}

// scrapeLoop reads every world's state on the scrape interval, and once
// more as soon as the configured world is ready, and publishes it as
// metrics.
func (d *Daemon) scrapeLoop(ctx context.Context) error {
	t := time.NewTicker(time.Duration(d.cfg.ScrapeInterval))
	defer t.Stop()
	ready := d.readyCh
	for {
		d.scrape(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-ready:
			ready = nil
		}
	}
}

func (d *Daemon) scrape(ctx context.Context) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, max(time.Duration(d.cfg.ScrapeInterval), 5*time.Second))
	defer cancel()
	names, err := world.List(ctx, d.js)
	if err != nil {
		if ctx.Err() == nil {
			d.log.Debug("scrape: list worlds", "err", err)
			d.metrics.SetWorlds(d.metrics.Worlds(), time.Since(start), 1)
		}
		return
	}
	stats := map[string]metrics.WorldStats{}
	failed := 0
	for _, name := range names {
		info, rc, err := d.inspect(ctx, name)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			d.log.Debug("scrape: inspect world", "world", name, "err", err)
			failed++
			continue
		}
		stats[name] = metrics.WorldStats{
			Depth:        info.Depth,
			Mailboxes:    info.Mailboxes,
			OldestAge:    info.OldestAge,
			DeadLetters:  info.DeadLetters,
			Unroutable:   info.Unroutable,
			Records:      rc.Records,
			Owned:        rc.Owned,
			Acquisitions: rc.Acquisitions,
			Posts:        info.Mailbox.LastSeq,
			BucketWrites: info.Bucket.LastSeq,
		}
	}
	d.metrics.SetWorlds(stats, time.Since(start), failed)
}

// inspect reads a world's figures for the scrape: its streams' (world), and
// its records' (ownership) unless --scrape-records=false.
func (d *Daemon) inspect(ctx context.Context, name string) (world.Info, ownership.RecordCounts, error) {
	w, err := world.Open(ctx, d.js, name)
	if err != nil {
		return world.Info{}, ownership.RecordCounts{}, err
	}
	info, err := w.Inspect(ctx, world.InspectOptions{})
	if err != nil || !d.cfg.scrapeRecords() || info.Bucket.Msgs == 0 {
		return info, ownership.RecordCounts{}, err
	}
	own, err := ownership.New(w, ownership.WithLogger(d.log))
	if err != nil {
		return info, ownership.RecordCounts{}, err
	}
	rc, err := own.CountRecords(ctx)
	return info, rc, err
}

// errBucketReplaced ends the auditor's and the retirer's watches of the
// world's bucket when its stream was removed, or removed and created again
// (world rm and add, a restore).
var errBucketReplaced = errors.New("the world's bucket was removed or created again")

// bucketCheck is how often a watch of the bucket checks that its stream is
// the one it opened.
const bucketCheck = 2 * time.Second

// bucketReplaced is closed once w's bucket stream is not the one w opened:
// gone, or created again (another creation time). The auditor's ordered
// consumer outlives its stream: it goes on on the new one from past the
// old one's last sequence, blind to every write below it, so the auditor
// ends its watch on it and starts again from the new stream's beginning.
// The retirer's key-value watch finds the new stream by itself, after its
// missed heartbeats (7 s in TestAuth_WorldRemovedAndAddedAgain); it ends
// on this too, within bucketCheck. It checks every bucketCheck until ctx
// ends.
func (d *Daemon) bucketReplaced(ctx context.Context, w *world.World) <-chan struct{} {
	ch := make(chan struct{})
	bucket := handles.Of(w).Bucket
	created := bucket.CachedInfo().Created
	go func() {
		t := time.NewTicker(bucketCheck)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			info, err := bucket.Info(ctx)
			if errors.Is(err, jetstream.ErrStreamNotFound) || err == nil && !info.Created.Equal(created) {
				close(ch)
				return
			}
		}
	}()
	return ch
}
