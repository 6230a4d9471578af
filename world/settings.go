package world

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/handles"
	"github.com/fencepost/fencepost/internal/jsapi"
	"github.com/fencepost/fencepost/internal/wire"
)

// The settings entry (wire.WorldKey) is a copy of the world's settings in
// its bucket, for clients that may post but not read the streams' info: a
// stream info request may ask for every subject of the stream
// (subjects_filter), which no subject permission can forbid, so
// fencepostd --auth gives producers a direct get of this one key instead
// (docs/security.md). Its value is the bucket metadata's two keys as a JSON
// object, read with the same version check. Create and Reset write it, and
// fencepostd writes it at start for a world made before it existed
// (PublishSettings).

// ErrNoSettings is returned by OpenToPost for a world whose bucket has no
// settings entry (made by a version before it, and not yet opened by
// fencepostd since, or reset meanwhile).
var ErrNoSettings = errors.New("world: no settings entry")

func settingsValue(cfg Config) ([]byte, error) {
	meta, err := encodeMeta(cfg)
	if err != nil {
		return nil, err
	}
	return json.Marshal(meta)
}

// PublishSettings writes w's settings entry when it is missing or differs
// from w.Config. It needs the permission to write the key (an operator's).
func PublishSettings(ctx context.Context, w *World) error {
	if w.h.KV == nil {
		return fmt.Errorf("world %q: opened for posting only: cannot write its settings entry", w.Name)
	}
	want, err := settingsValue(w.Config)
	if err != nil {
		return err
	}
	e, err := w.h.KV.Get(ctx, wire.WorldKey)
	for wait := 10 * time.Millisecond; errors.Is(err, nats.ErrNoResponders) && ctx.Err() == nil && wait < 2*time.Second; wait *= 2 {
		// A bucket just created on a cluster: its replicas may not answer
		// direct gets yet (seen in CI as "no responders").
		time.Sleep(wait)
		e, err = w.h.KV.Get(ctx, wire.WorldKey)
	}
	switch {
	case err == nil && string(e.Value()) == string(want):
		return nil
	case err != nil && !errors.Is(err, jetstream.ErrKeyNotFound):
		return fmt.Errorf("world %q: read its settings entry: %w", w.Name, err)
	}
	if _, err := w.h.KV.Put(ctx, wire.WorldKey, want); err != nil {
		return fmt.Errorf("world %q: write its settings entry: %w", w.Name, err)
	}
	return nil
}

// OpenToPost opens a world for posting only, from its settings entry: one
// direct get of that key, and no stream info. The World it returns has
// PostOnly set and no KV, Bucket or Mailbox: it serves queue.New (Send)
// and nothing else. It is how a user that may not read the world's
// streams (a producer under fencepostd --auth) opens it; Open is the way
// for everyone else.
func OpenToPost(ctx context.Context, js jetstream.JetStream, name string) (*World, error) {
	if err := wire.ValidateWorld(name); err != nil {
		return nil, err
	}
	m, err := jsapi.DirectLast(ctx, js.Conn(), wire.BucketStream(name), wire.KeySubject(name, wire.WorldKey))
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return nil, &UnknownWorldError{Name: name}
	case errors.Is(err, jsapi.ErrNotFound):
		return nil, fmt.Errorf("%w: world %q: its bucket has no settings entry (%s); fencepostd writes it at start, and world add and reset write it", ErrNoSettings, name, wire.WorldKey)
	case err != nil:
		return nil, fmt.Errorf("world %q: read its settings entry: %w", name, err)
	}
	if jsapi.IsMarker(m.Header) {
		return nil, fmt.Errorf("%w: world %q: its settings entry (%s) was deleted", ErrNoSettings, name, wire.WorldKey)
	}
	var meta map[string]string
	if err := json.Unmarshal(m.Data, &meta); err != nil {
		return nil, fmt.Errorf("%w: world %q: its settings entry is not a JSON object: %v", ErrInvalidConfig, name, err)
	}
	cfg, err := decodeMeta(name, meta)
	if err != nil {
		return nil, err
	}
	return &World{Name: name, Config: cfg, PostOnly: true, h: handles.Handles{JS: js}}, nil
}
