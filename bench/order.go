package bench

import (
	"cmp"
	"fmt"
	"slices"
)

// orderCheck is what the per-id order check found on one side.
type orderCheck struct {
	checked    int64    // messages checked: posted, their stream sequence known, delivered
	violations int64    // of those, first delivered after a later message of their id
	examples   []string // up to maxOrderExamples
}

// maxOrderExamples bounds the examples of an order check.
const maxOrderExamples = 5

// checkOrder checks per-id order from the outside: the messages of an id,
// in the order the stream stored them (their sequence), must reach a
// handler in that order. A message whose earliest handler start comes
// after the earliest handler start of a later message of its id was
// delivered out of order (at-least-once allows delivering a message again
// after later ones, which is a duplicate, not this). Messages never
// delivered are lost, not out of order; those whose sequence the side
// does not know (0) are not checked. Both times are this machine's clock.
func (s *side) checkOrder(ids []string) orderCheck {
	s.mu.Lock()
	defer s.mu.Unlock()
	type msg struct {
		seq uint64
		n   uint64
		at  int64
	}
	byID := map[int32][]msg{}
	var c orderCheck
	for n, p := range s.posted {
		if !p || s.seqs[n] == 0 || n >= len(s.first) || s.first[n] == 0 {
			continue
		}
		byID[s.idxs[n]] = append(byID[s.idxs[n]], msg{s.seqs[n], uint64(n), s.first[n]})
		c.checked++
	}
	idxs := make([]int32, 0, len(byID))
	for idx := range byID {
		idxs = append(idxs, idx)
	}
	slices.Sort(idxs)
	for _, idx := range idxs {
		ms := byID[idx]
		slices.SortFunc(ms, func(a, b msg) int { return cmp.Compare(a.seq, b.seq) })
		// Walk from the last: a message is out of order when a later one
		// (by sequence) started earlier.
		var later *msg
		for i := len(ms) - 1; i >= 0; i-- {
			m := &ms[i]
			if later != nil && m.at > later.at {
				c.violations++
				if len(c.examples) < maxOrderExamples {
					id := fmt.Sprint(idx)
					if int(idx) < len(ids) {
						id = ids[idx]
					}
					c.examples = append(c.examples, fmt.Sprintf("%q message %d (sequence %d) first delivered %.3f ms after message %d (sequence %d)",
						id, m.n, m.seq, float64(m.at-later.at)/1e6, later.n, later.seq))
				}
			}
			if later == nil || m.at < later.at {
				later = m
			}
		}
	}
	return c
}
