package verify

import (
	"context"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencepost/fencepost/internal/wire"
	"github.com/fencepost/fencepost/testkit/history"
)

// commitLog is a list of commits, safe for concurrent use: the commits the
// owners reported.
type commitLog struct {
	mu sync.Mutex
	cs []history.Commit
}

func (l *commitLog) add(c history.Commit) {
	l.mu.Lock()
	l.cs = append(l.cs, c)
	l.mu.Unlock()
}

func (l *commitLog) all() []history.Commit {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]history.Commit(nil), l.cs...)
}

// CursorWrite is a cursor write the broker stored, as read from the
// bucket stream (history.CursorWrite).
type CursorWrite = history.CursorWrite

// Coverage is what the follower saw of the bucket stream
// (history.Coverage).
type Coverage = history.Coverage

// follower reads every message of the world's bucket stream as it is
// stored (history.BucketFollower, which the fault suite shares): ownership
// records, to name the holder a commit's fence expected, and cursor writes.
type follower struct{ b *history.BucketFollower }

func followBucket(ctx context.Context, js jetstream.JetStream, world string, shards int) (*follower, error) {
	b, err := history.FollowBucket(ctx, js, world, shards)
	if err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	return &follower{b}, nil
}

// caughtUp says whether the follower has read up to seq.
func (f *follower) caughtUp(seq uint64) bool { return f.b.CaughtUp(seq) }

func (f *follower) stop() { f.b.Stop() }

// commits merges the cursor writes read from the bucket stream with the
// commits the owners reported (history.BucketFollower.Commits).
func (f *follower) commits(reported []history.Commit, deliveries []history.Delivery) ([]history.Commit, map[uint64]map[string]wire.PendingID, []CursorWrite, Coverage) {
	return f.b.Commits(reported, deliveries)
}
