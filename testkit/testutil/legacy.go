package testutil

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/world"
)

// LegacyWorld makes a world as fencepost made it before max_body,
// max_headers and max_bytes existed: its settings JSON has max_msg_size
// (body plus headers), max_msgs_per_mailbox and max_bytes_per_mailbox
// only, and its mailbox stream keeps min(maxMsgs, maxBytesPerMailbox /
// maxMsgSize) messages per subject (the byte limit folded into a count).
// It returns the world's name; open it with Client.World.
func (e *Env) LegacyWorld(t testing.TB, maxMsgSize int32, maxMsgs, maxBytesPerMailbox int64) string {
	t.Helper()
	cfg := world.Config{MaxMsgSize: maxMsgSize, MaxMsgsPerMailbox: maxMsgs, MaxBytesPerMailbox: maxBytesPerMailbox}
	w := e.World(t, cfg)
	ctx := Ctx(t, 30*time.Second)
	js := e.Client.JetStream()
	// The stream is the one the old code made; the settings lose the
	// fields it did not know.
	var fields map[string]any
	b, err := json.Marshal(w.Config)
	if err == nil {
		err = json.Unmarshal(b, &fields)
	}
	if err != nil {
		t.Fatal(err)
	}
	delete(fields, "max_body")
	delete(fields, "max_headers")
	delete(fields, "max_bytes")
	old, err := json.Marshal(fields)
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, wire.BucketStream(w.Name))
	if err != nil {
		t.Fatal(err)
	}
	sc := s.CachedInfo().Config
	sc.Metadata["fencepost.world.config"] = string(old)
	if _, err := js.UpdateStream(ctx, sc); err != nil {
		t.Fatal(err)
	}
	return w.Name
}
