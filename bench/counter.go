package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"sort"
	"strconv"

	"github.com/fencepost/fencepost/client"
	"github.com/fencepost/fencepost/drain"
	"github.com/fencepost/fencepost/ownership"
)

// The counter scenario (docs/design.md 3.12): the takeover scenario's owner
// processes and faults (kill, stop, forced seize), each running a state
// handler that adds one to its id's "count" for every measured message
// (not the warm-up's), in the id's state, committed with the message. At
// the end every id's counter must equal the messages posted to it:
// Report.CountersOff counts those that do not (exactly-once effects,
// docs/design.md 3.12), and Report.OK fails on any.

// counterKey is the state key the counter scenario counts in.
const counterKey = "count"

// counting returns the state handler that runs h (the scenario's report
// of the delivery) and then adds one to the id's counter for a measured
// message.
func counting(h drain.Handler) drain.StateHandler {
	return func(ctx context.Context, m drain.Message, st *drain.State) error {
		if err := h(ctx, m); err != nil {
			return err
		}
		if len(m.Body) < 8 || binary.BigEndian.Uint64(m.Body[0:8]) == 0 {
			return nil // a warm-up message: not counted
		}
		n := 0
		if v, ok := st.Get(counterKey); ok {
			var err error
			if n, err = strconv.Atoi(string(v)); err != nil {
				return fmt.Errorf("bench: the counter of %q is %q: %w", m.ID, v, err)
			}
		}
		return st.Put(counterKey, []byte(strconv.Itoa(n+1)))
	}
}

// drainFinal is the final drain of one id under l: with the id's state
// and counting in the counter scenario.
func drainFinal(ctx context.Context, w *client.World, l *ownership.Lease, h drain.Handler, counter bool) error {
	if !counter {
		_, err := w.Drainer.DrainLease(ctx, l, h)
		return err
	}
	_, err := w.Drainer.DrainLease(ctx, l, counting(h).Handler(), drain.WithState())
	return err
}

// checkCounters compares every id's counter with the messages posted to
// it (each send is acknowledged before the run goes on: a failed one ends
// the run) and fills the report's counter figures.
func checkCounters(ctx context.Context, w *client.World, s *side, rep *Report) error {
	ids := make([]string, 0, len(s.ids))
	for id := range s.ids {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		st, err := w.Mailboxes.ReadState(ctx, id)
		if err != nil {
			return fmt.Errorf("bench: the counter of %q: %w", id, err)
		}
		want := s.perID[s.ids[id]].sent.Load()
		got := int64(0)
		if v, ok := st.Values[counterKey]; ok {
			if got, err = strconv.ParseInt(string(v), 10, 64); err != nil {
				return fmt.Errorf("bench: the counter of %q is %q: %w", id, v, err)
			}
		}
		rep.CountersChecked++
		rep.CounterMessages += got
		if got != want {
			rep.CountersOff++
			if len(rep.CounterExamples) < 5 {
				rep.CounterExamples = append(rep.CounterExamples, fmt.Sprintf("%s: counter %d, posted %d", id, got, want))
			}
		}
	}
	return nil
}
