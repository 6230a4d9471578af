package ownership

import (
	"context"
	"fmt"

	"github.com/fencepost/fencepost/internal/wire"
)

// unchangedBatched is Unchanged on a single-replica world: the record is
// read with those of every call that comes meanwhile, in one multi-last
// direct get of at most jsapi.MaxMultiLast (jsapi.LastReads). Every answer
// comes from a read sent after its call, and the single replica answers
// from the state every conditional write is checked against, as the
// leader read it replaces does.
func (s *Store) unchangedBatched(ctx context.Context, id string, rev uint64) (bool, error) {
	m, err := s.reads.Read(ctx, wire.RecordSubject(s.world, id))
	if err != nil {
		return false, fmt.Errorf("ownership: read record of %q: %w", id, err)
	}
	return m != nil && m.Sequence == rev, nil
}
