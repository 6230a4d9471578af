package drain

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/fencepost/fencepost/ownership"
)

// DefaultParallel is how many ids DrainAll drains at once.
const DefaultParallel = 32

// DrainAll drains the mailboxes of many ids held by one node, e.g. every
// id a node owns, DefaultParallel ids at a time. Each id is a DrainLease
// with its own lock and fenced commits: per id, messages reach h in order;
// across ids, h runs concurrently. It returns the sum of the results and
// the errors of the ids that did not drain (each naming its id; errors.Is
// and errors.As see through them).
func (d *Drainer) DrainAll(ctx context.Context, leases []*ownership.Lease, h Handler, opts ...RunOption) (Result, error) {
	var (
		mu    sync.Mutex
		total Result
		errs  []error
		wg    sync.WaitGroup
		next  = make(chan *ownership.Lease)
	)
	for range min(DefaultParallel, len(leases)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for l := range next {
				res, err := d.DrainLease(ctx, l, h, opts...)
				mu.Lock()
				total.Count += res.Count
				total.Acked += res.Acked
				total.DeadLettered += res.DeadLettered
				total.Deliveries += res.Deliveries
				if err != nil {
					errs = append(errs, fmt.Errorf("drain %q: %w", l.ID, err))
				}
				mu.Unlock()
			}
		}()
	}
feed:
	for _, l := range leases {
		select {
		case next <- l:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		errs = append(errs, err)
	}
	return total, errors.Join(errs...)
}
