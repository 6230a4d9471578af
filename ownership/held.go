package ownership

import (
	"context"
	"strings"

	"github.com/fencepost/fencepost/internal/wire"
)

// CountHeld counts the ids of the world with a live lease: it lists the
// record keys and asks Owner of each (a read through the stream leader).
// An id whose record cannot be read is not counted. The answer is for a
// summary (drain.Drainer.WorldStat), never for a decision.
func (s *Store) CountHeld(ctx context.Context) (int, error) {
	keys, err := s.kv.ListKeysFiltered(ctx, wire.RecordPrefix+"*")
	if err != nil {
		return 0, err
	}
	n := 0
	for key := range keys.Keys() {
		id, err := wire.DecodeID(strings.TrimPrefix(key, wire.RecordPrefix)) // a key, not a subject
		if err != nil {
			continue
		}
		if st, err := s.Owner(ctx, id); err == nil && st.Held {
			n++
		}
	}
	return n, nil
}
