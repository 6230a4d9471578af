package ownership

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/wire"
)

// LiveNodes lists the nodes whose node lease is live now by the local
// clock (a session is open for each: workers spread new ids over them).
// It reads every node lease through the stream leader; a lease it cannot
// read is left out. The answer is advice, not authority: a node may lapse
// or start right after.
func (s *Store) LiveNodes(ctx context.Context) ([]string, error) {
	keys, err := s.kv.ListKeysFiltered(ctx, wire.NodePrefix+"*")
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("ownership: list node leases: %w", err)
	}
	var out []string
	for k := range keys.Keys() {
		node, err := wire.DecodeID(strings.TrimPrefix(k, wire.NodePrefix))
		if err != nil {
			continue
		}
		v, err := s.readNode(ctx, "node-list", node)
		if err != nil {
			continue
		}
		if v.live(time.Now()) {
			out = append(out, node)
		}
	}
	return out, nil
}
