package world

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/wire"
)

// ErrUnknownWorld is returned when a world does not exist
// (*UnknownWorldError names it).
var ErrUnknownWorld = errors.New("world: unknown world")

// UnknownWorldError names a world that does not exist, or lacks its
// mailbox stream (Missing).
type UnknownWorldError struct {
	Name    string
	Missing string // the missing mailbox stream; "" when the world is absent
}

func (e *UnknownWorldError) Error() string {
	if e.Missing != "" {
		return fmt.Sprintf("%v %q: its mailbox stream %s is missing", ErrUnknownWorld, e.Name, e.Missing)
	}
	return fmt.Sprintf("%v %q", ErrUnknownWorld, e.Name)
}

// Is matches ErrUnknownWorld.
func (e *UnknownWorldError) Is(target error) bool { return target == ErrUnknownWorld }

// ErrWorldExists is returned by Create when the world is already there with
// other settings.
var ErrWorldExists = errors.New("world: exists with other settings")

// World is an open world: its name and settings. The JetStream handles
// behind it are fencepost's own business (internal/handles): a program
// works with a world through typed operations.
type World struct {
	Name   string
	Config Config

	// PostOnly: opened by OpenToPost, from the settings entry alone. The
	// world serves posting and nothing else.
	PostOnly bool

	h handles.Handles
}

// Handles gives fencepost's own packages the JetStream handles behind the
// world (handles.Of). Its argument's type is internal: a program outside
// fencepost cannot call it.
func (w *World) Handles(handles.Key) *handles.Handles { return &w.h }

// Create makes a world with cfg (zero fields take defaults). Creating a world
// that exists with the same settings is not an error; with other settings it
// is ErrWorldExists.
func Create(ctx context.Context, js jetstream.JetStream, name string, cfg Config) (*World, error) {
	if err := wire.ValidateWorld(name); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if w, err := Open(ctx, js, name); err == nil {
		if w.Config != cfg {
			return nil, fmt.Errorf("%w: world %q", ErrWorldExists, name)
		}
		if !w.AllowsState() {
			// A world created before per-id state: creating it again
			// with its settings lets its bucket take atomic batches.
			if err := bucketSettings(ctx, js, name); err != nil {
				return nil, err
			}
		}
		if !w.AllowsTimers() {
			// A world created before timers: creating it again with its
			// settings adds its timer stream (world/timer.go).
			if err := addTimers(ctx, js, w); err != nil {
				return nil, err
			}
		}
		if !w.AllowsState() || !w.AllowsTimers() {
			return Open(ctx, js, name)
		}
		return w, nil
	} else if !errors.Is(err, ErrUnknownWorld) {
		return nil, err
	}
	if cfg.MaxHeaders > MaxStoredHeaders {
		// Checked for new worlds only: a world made before this check
		// opens as it is (the broker never stored more anyway).
		return nil, fmt.Errorf("%w: max_headers %d is over %d bytes, the most headers the broker stores with one message (JetStream error 10097): lower --max-headers",
			ErrInvalidConfig, cfg.MaxHeaders, MaxStoredHeaders)
	}
	if mp := js.Conn().MaxPayload(); mp > 0 && int64(cfg.MaxMsgSize) > mp {
		// The server would refuse a post of max_body with max_headers
		// before the stream sees it: the world's limits would not be its.
		return nil, fmt.Errorf("%w: max_body %d + max_headers %d = %d bytes is over the server's max_payload %d: lower max_body (--max-body) or raise max_payload in the server's config",
			ErrInvalidConfig, cfg.MaxBody, cfg.MaxHeaders, cfg.MaxMsgSize, mp)
	}
	meta, err := encodeMeta(cfg)
	if err != nil {
		return nil, err
	}
	storage := cfg.storageType()
	// The timer stream, then the mailbox stream that sources it, then the
	// bucket: a world is only visible (Open finds its bucket) once all
	// exist.
	if err := createTimers(ctx, js, name, cfg); err != nil {
		return nil, err
	}
	if err := createMailbox(ctx, js, mailboxConfig(name, cfg, storage, true)); err != nil {
		return nil, fmt.Errorf("world %q: create mailbox stream: %w", name, err)
	}
	if _, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      wire.Bucket(name),
		Description: "fencepost world " + name + ": ownership records, cursors, locks, node leases",
		History:     1,
		Replicas:    cfg.Replicas,
		Storage:     storage,
		Metadata:    meta,
	}); err != nil {
		return nil, fmt.Errorf("world %q: create bucket: %w", name, err)
	}
	if err := bucketSettings(ctx, js, name); err != nil {
		return nil, err
	}
	w, err := Open(ctx, js, name)
	if err != nil {
		return nil, err
	}
	if err := PublishSettings(ctx, w); err != nil {
		return nil, err
	}
	return w, nil
}

// storeRaceTries bounds createMailbox's tries; storeRacePause is the wait
// between two.
const (
	storeRaceTries = 5
	storeRacePause = 20 * time.Millisecond
)

// createMailbox creates the mailbox stream, trying again while the server
// answers that it could not create the stream's store.
//
// That answer comes from a race in the server, not from the request: when
// the last stream of an account is deleted, the server removes the
// account's empty store directory in a goroutine of its own, after the
// delete has been answered. A stream created in that moment (a world
// created right after the server's last world was removed) finds the
// directory gone under it: "could not create storage directory", error
// 10049. Nothing was created, so trying again is safe, and the goroutine
// is done by then. A store that really cannot be created (a full disk, a
// directory without permission) fails every try and is reported as it is.
// docs/design.md section 5, "Creating a world right after removing one".
func createMailbox(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) error {
	for try := 1; ; try++ {
		_, err := js.CreateOrUpdateStream(ctx, cfg)
		if err == nil || try == storeRaceTries || !isStoreRace(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(storeRacePause):
		}
	}
}

// isStoreRace reports the server's "error creating store for stream".
func isStoreRace(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == 10049 &&
		strings.Contains(apiErr.Description, "error creating store for stream")
}

// bucketSettings sets what the bucket stream needs beyond a KV bucket's
// defaults.
//
// Rollups off: a KV bucket allows them by default, and a message with
// "Nats-Rollup: all" on any key would wipe the whole bucket, every record
// and epoch with it, and the permission to write one key (an owner's,
// docs/security.md) would be enough to send one. fencepost never rolls up:
// it deletes keys with delete markers and resets a world with a stream
// purge, an operator's API.
//
// Atomic batches on: per-id state is committed with the cursor in one
// atomic batch (docs/design.md 3.12). A world created before it lacks the
// setting: it opens and works as before, and a state handler on it is
// refused with ErrNoState until `world add` (Create with the world's
// settings) is run again, which sets it.
func bucketSettings(ctx context.Context, js jetstream.JetStream, name string) error {
	s, err := js.Stream(ctx, wire.BucketStream(name))
	if err != nil {
		return fmt.Errorf("world %q: bucket stream: %w", name, err)
	}
	cfg := s.CachedInfo().Config
	if !cfg.AllowRollup && cfg.AllowAtomicPublish {
		return nil
	}
	cfg.AllowRollup = false
	cfg.AllowAtomicPublish = true
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("world %q: set the bucket stream's rollups off and atomic batches on: %w", name, err)
	}
	return nil
}

// ErrNoState: the world's bucket does not take atomic batches (a world
// created before per-id state). Create with the world's settings (the
// CLI's `world add`) turns them on.
var ErrNoState = errors.New("world: the bucket does not allow atomic batches (a world created before per-id state)")

// AllowsState says whether the world's bucket takes the atomic batches that
// per-id state is committed with.
func (w *World) AllowsState() bool {
	return w.h.Bucket != nil && w.h.Bucket.CachedInfo().Config.AllowAtomicPublish
}

// mailboxConfig is the mailbox stream of a world: one subject per id for
// its mailbox and one for its dead letters. Each limit is the world's
// setting of the same meaning (docs/design.md section 5, "Limits"):
// max_msgs_per_subject is the messages per mailbox (MailboxMsgs: for a
// world with the legacy max_bytes_per_mailbox, the count it was enforced
// as), max_bytes the world's bytes (none when 0), max_msg_size its body
// plus header room; a post over a limit is refused and stores nothing
// (discard new, per subject).
//
// With timers, it sources the timer stream's fired timers into the
// mailboxes (world/timer.go).
func mailboxConfig(name string, cfg Config, storage jetstream.StorageType, timers bool) jetstream.StreamConfig {
	maxBytes := cfg.MaxBytes
	if maxBytes == 0 {
		maxBytes = -1
	}
	var republish *jetstream.RePublish
	if cfg.Partitions > 0 {
		republish = &jetstream.RePublish{Source: wire.RepublishSource(name), Destination: wire.RepublishDestination(name, cfg.Partitions)}
	}
	var transform *jetstream.SubjectTransformConfig
	if cfg.Shards > 0 {
		transform = &jetstream.SubjectTransformConfig{Source: wire.ShardedTransformSource(name), Destination: wire.ShardedTransformDestination(name, cfg.Shards)}
	}
	var sources []*jetstream.StreamSource
	if timers {
		sources = []*jetstream.StreamSource{timerSource(name)}
	}
	return jetstream.StreamConfig{
		Name:                 wire.MailboxStream(name),
		Description:          "fencepost world " + name + ": mailboxes and dead letters",
		Subjects:             []string{wire.MailboxFilter(name), wire.DeadLetterFilter(name)},
		Retention:            jetstream.LimitsPolicy,
		Discard:              jetstream.DiscardNew,
		DiscardNewPerSubject: true,
		MaxMsgsPerSubject:    cfg.MailboxMsgs(),
		MaxBytes:             maxBytes,
		MaxMsgSize:           cfg.MaxMsgSize,
		Duplicates:           cfg.DedupeWindow,
		Replicas:             cfg.Replicas,
		Storage:              storage,
		AllowDirect:          true,
		AllowAtomicPublish:   true,
		RePublish:            republish,
		SubjectTransform:     transform,
		Sources:              sources,
	}
}

// storageType is the JetStream storage of the world's streams.
func (c Config) storageType() jetstream.StorageType {
	if c.Storage == MemoryStorage {
		return jetstream.MemoryStorage
	}
	return jetstream.FileStorage
}

// Open binds an existing world.
func Open(ctx context.Context, js jetstream.JetStream, name string) (*World, error) {
	if err := wire.ValidateWorld(name); err != nil {
		return nil, err
	}
	bucket, err := js.Stream(ctx, wire.BucketStream(name))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, &UnknownWorldError{Name: name}
	}
	if err != nil {
		return nil, fmt.Errorf("world %q: %w", name, err)
	}
	cfg, err := decodeMeta(name, bucket.CachedInfo().Config.Metadata)
	if err != nil {
		return nil, err
	}
	mailbox, err := js.Stream(ctx, wire.MailboxStream(name))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, &UnknownWorldError{Name: name, Missing: wire.MailboxStream(name)}
	}
	if err != nil {
		return nil, fmt.Errorf("world %q: %w", name, err)
	}
	kv, err := js.KeyValue(ctx, wire.Bucket(name))
	if err != nil {
		return nil, fmt.Errorf("world %q: bind bucket: %w", name, err)
	}
	timers := sourcesTimers(name, mailbox.CachedInfo().Config)
	return &World{Name: name, Config: cfg, h: handles.Handles{KV: kv, Bucket: bucket, Mailbox: mailbox, Timers: timers, JS: js}}, nil
}

// Reset drops every record, epoch, cursor, lock, node lease, mailbox and dead
// letter of the world, keeping its settings. Epochs start again at 1;
// mailbox sequences do not: they continue after the old stream's last one.
//
// A stream purge keeps the stream's duplicate-detection table, so a message
// posted after a purge with a Nats-Msg-Id used before it would be answered
// "duplicate" and stored nowhere. Reset therefore deletes the mailbox stream
// and creates it again from the world's settings (mailboxConfig), with
// FirstSeq one past the old LastSeq: cursors, purgers and dead letters
// compare sequences ("seq <= cursor is committed"), and a sequence that never
// repeats keeps a cursor or a purge bound from before the reset from
// covering a message posted after it. The bucket is purged as before (its
// stream sequences continue on their own).
//
// The order: the bucket is purged first (see below); then the mailbox
// stream is sealed, so that the LastSeq read next is its last (a sealed
// stream refuses every publish), deleted, and created again. A producer posting during
// the reset gets an error and never "posted": "invalid operation on sealed
// stream" while it is sealed, no responders or no stream while it is gone.
// A message posted before the seal is dropped with the rest, as a reset
// does. If Reset fails after the delete and before the create, the world has
// no mailbox stream and Open refuses it; `fencepost world add` creates the
// stream again, with sequences from 1, which is safe since the cursors
// went first.
func Reset(ctx context.Context, js jetstream.JetStream, name string) error {
	w, err := Open(ctx, js, name)
	if err != nil {
		return err
	}
	// The bucket first: once its cursors are gone, no step below that
	// fails can leave a cursor covering a message posted later (a world
	// re-created by `world add` after a failed reset starts its sequences
	// at 1 again). What a failure leaves is committed mail delivered again.
	if err := w.h.Bucket.Purge(ctx); err != nil {
		return fmt.Errorf("world %q: purge bucket: %w", name, err)
	}
	// The purge took the settings entry with it: producers that may not
	// read the streams open the world from it (OpenToPost).
	if err := PublishSettings(ctx, w); err != nil {
		return err
	}
	// Watchers see no purge: tell them (ownership.Watch).
	if _, err := w.h.KV.Put(ctx, wire.ResetKey, []byte(time.Now().UTC().Format(time.RFC3339Nano))); err != nil {
		return fmt.Errorf("world %q: note the reset for watchers: %w", name, err)
	}
	info, err := w.h.Mailbox.Info(ctx)
	if err != nil {
		return fmt.Errorf("world %q: mailbox stream: %w", name, err)
	}
	if !info.Config.Sealed {
		sealed := info.Config
		sealed.Sealed = true
		if _, err := js.UpdateStream(ctx, sealed); err != nil {
			return fmt.Errorf("world %q: seal the mailbox stream: %w", name, err)
		}
		if info, err = w.h.Mailbox.Info(ctx); err != nil {
			return fmt.Errorf("world %q: mailbox stream: %w", name, err)
		}
	}
	// The timers go with the mailboxes: purged while the mailbox stream
	// is sealed and before it is made again, whose source then starts
	// after them (a fired copy left in the timer stream would be sourced
	// into the new mailboxes).
	if w.h.Timers {
		if err := jsapi.Purge(ctx, js.Conn(), wire.TimerStream(name), "", 0); err != nil {
			return fmt.Errorf("world %q: purge the timer stream: %w", name, err)
		}
	}
	cfg := mailboxConfig(name, w.Config, w.Config.storageType(), w.h.Timers)
	cfg.FirstSeq = info.State.LastSeq + 1
	if err := js.DeleteStream(ctx, wire.MailboxStream(name)); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("world %q: delete the mailbox stream: %w", name, err)
	}
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		return fmt.Errorf("world %q: create the mailbox stream again (first sequence %d): %w", name, cfg.FirstSeq, err)
	}
	return nil
}

// Remove deletes the world and all it holds.
func Remove(ctx context.Context, js jetstream.JetStream, name string) error {
	if _, err := Open(ctx, js, name); err != nil {
		return err
	}
	if err := js.DeleteStream(ctx, wire.MailboxStream(name)); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("world %q: delete mailbox stream: %w", name, err)
	}
	if err := js.DeleteKeyValue(ctx, wire.Bucket(name)); err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
		return fmt.Errorf("world %q: delete bucket: %w", name, err)
	}
	if err := js.DeleteStream(ctx, wire.TimerStream(name)); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("world %q: delete the timer stream: %w", name, err)
	}
	return nil
}

// List returns the names of all worlds, sorted.
func List(ctx context.Context, js jetstream.JetStream) ([]string, error) {
	prefix := wire.BucketStream("")
	names := js.StreamNames(ctx)
	var out []string
	for n := range names.Name() {
		if w, ok := strings.CutPrefix(n, prefix); ok && wire.ValidateWorld(w) == nil {
			out = append(out, w)
		}
	}
	if err := names.Err(); err != nil {
		return nil, err
	}
	sort.Strings(out)
	return out, nil
}
