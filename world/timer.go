package world

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/wire"
)

// Timers (docs/contract.md section 11, docs/wire.md "Timers"): a world's
// timer stream holds its pending timers, one broker message schedule per
// subject, and the copies the server publishes when they fire; the mailbox
// stream sources the copies into the mailboxes. Every world made since has
// both; a world made before gets them from Create with its settings (the
// CLI's `world add`), and works as before without them: a timer sent to
// it is refused (ErrNoTimers).

// ErrNoTimers: the world has no timer stream (made before timers). Create
// with the world's settings (`fencepost world add`) adds it.
var ErrNoTimers = errors.New("world: no timer stream (a world made before timers: run `fencepost world add` with its settings to add it)")

// AllowsTimers says whether the world has its timer stream. A world open
// for posting only does not know: it says true, and a timer sent to a
// world without one is refused by the server (no stream takes it).
func (w *World) AllowsTimers() bool { return w.PostOnly || w.h.Timers }

// timerConfig is the timer stream of a world. Schedules need rollups
// (the server rolls a timer's subject up to its newest schedule) and
// discard old: no limit here may drop a message, so none is set but the
// message size, which is the mailbox stream's (a source may not be
// larger than its sourcing stream), and the mailbox stream's limits hold
// each fired copy as they hold a post. Per-message TTLs are on for the
// short-lived markers a revoked reminder leaves (queue.Remind).
func timerConfig(name string, cfg Config, storage jetstream.StorageType) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:              wire.TimerStream(name),
		Description:       "fencepost world " + name + ": timers (message schedules) and their fired copies, which the mailbox stream sources",
		Subjects:          []string{wire.TimerFilter(name), wire.FiredFilter(name)},
		Retention:         jetstream.LimitsPolicy,
		Discard:           jetstream.DiscardOld,
		MaxMsgSize:        cfg.MaxMsgSize,
		MaxBytes:          -1,
		Duplicates:        cfg.DedupeWindow,
		Replicas:          cfg.Replicas,
		Storage:           storage,
		AllowDirect:       true,
		AllowMsgSchedules: true,
		AllowRollup:       true,
		AllowMsgTTL:       true,
	}
}

// timerSource is the mailbox stream's source of fired timers: the timer
// stream's fired subjects, each into its id's mailbox subject.
func timerSource(name string) *jetstream.StreamSource {
	return &jetstream.StreamSource{
		Name: wire.TimerStream(name),
		SubjectTransforms: []jetstream.SubjectTransformConfig{{
			Source: wire.FiredFilter(name), Destination: wire.FiredDestination(name),
		}},
	}
}

// createTimers creates the world's timer stream.
func createTimers(ctx context.Context, js jetstream.JetStream, name string, cfg Config) error {
	// createMailbox's retries hold for any stream: a world made right
	// after the server's last stream was deleted.
	if err := createMailbox(ctx, js, timerConfig(name, cfg, cfg.storageType())); err != nil {
		return fmt.Errorf("world %q: create the timer stream: %w", name, err)
	}
	return nil
}

// addTimers gives a world made before timers its timer stream, and its
// mailbox stream the source of fired timers (the rest of the mailbox
// stream's config as it is).
func addTimers(ctx context.Context, js jetstream.JetStream, w *World) error {
	if err := createTimers(ctx, js, w.Name, w.Config); err != nil {
		return err
	}
	info, err := w.h.Mailbox.Info(ctx)
	if err != nil {
		return fmt.Errorf("world %q: mailbox stream: %w", w.Name, err)
	}
	cfg := info.Config
	if sourcesTimers(w.Name, cfg) {
		return nil
	}
	cfg.Sources = append(cfg.Sources, timerSource(w.Name))
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("world %q: let the mailbox stream source fired timers: %w", w.Name, err)
	}
	return nil
}

// sourcesTimers says whether a mailbox stream config sources the world's
// fired timers: whether the world has timers (a `world add` that stopped
// between making the timer stream and the source: not yet, and the next
// one completes it).
func sourcesTimers(name string, cfg jetstream.StreamConfig) bool {
	for _, s := range cfg.Sources {
		if s != nil && s.Name == wire.TimerStream(name) {
			return true
		}
	}
	return false
}
