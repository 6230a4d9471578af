package faults

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/testkit/history"
)

// isolation is one OwnerIsolate fault: node's connections refused from at
// for dur.
type isolation struct {
	at   time.Time
	node string
	dur  time.Duration
}

// clockFault injects OwnerIsolate, ClockJumpFwd or ClockJumpBack, and fills
// in f's target, start and end (an isolation's); false if there was no
// owner to do it to.
//
//   - OwnerIsolate: the connections of one owner (the owners with faulted
//     clocks in turn, else one that holds ids) are held (nothing passes,
//     they stay open) for 1.5 to 2 ttl, then let through again. The owner runs on meanwhile: it cannot
//     renew, so it must stop acting by its own clock (self-fence) before
//     another owner, by its clock, takes its ids over. This is where a
//     clock fault shows.
//   - ClockJumpFwd / ClockJumpBack: the wall clock of the owner whose
//     clock spec has a jump moves by that much, forward or back (SIGUSR1,
//     SIGUSR2 to the process; a restarted process starts without the jump,
//     so a jump back may leave it behind the true clock).
func clockFault(t testing.TB, d *deployment, own *owners, sc scenario, kind string, res *outcome, f *faultAt) bool {
	var slots []int
	for s := range sc.Clocks {
		slots = append(slots, s)
	}
	sort.Ints(slots)
	switch kind {
	case OwnerIsolate:
		if d.owners == nil {
			t.Fatalf("%s needs OwnerProxies", kind)
		}
		var p *ownerProc
		if len(slots) > 0 {
			p = own.slot(slots[len(res.isolations)%len(slots)])
		}
		if p == nil || p.active.Load() == 0 {
			p = own.pick(rand.IntN(16))
		}
		if p == nil {
			return false
		}
		dur := sc.TTL + sc.TTL/2 + time.Duration(rand.IntN(int(sc.TTL/2/time.Millisecond)+1))*time.Millisecond
		// Held, not cut: the owner's connections stay open and nothing
		// gets through, as in a partition that drops packets. (A cut
		// connection ends its drains at once; a held one leaves the owner
		// with its batch in hand and its own clock to stop by.)
		f.target, f.at = p.node, time.Now()
		d.owners[p.slot].Hold(dur)
		res.isolations = append(res.isolations, isolation{at: time.Now(), node: p.node, dur: dur})
		time.Sleep(dur) // the fault lasts this long
		f.end = time.Now()
		return true
	case ClockJumpFwd, ClockJumpBack:
		for _, s := range slots {
			if sc.Clocks[s].Jump == 0 {
				continue
			}
			var p *ownerProc
			// It may be between two processes (the supervisor restarts
			// one a ttl after it exits).
			if !waitUntil(3*sc.TTL, func() bool { p = own.slot(s); return p != nil }) {
				return false
			}
			sig := syscall.SIGUSR1
			if kind == ClockJumpBack {
				sig = syscall.SIGUSR2
			}
			f.target, f.at = p.node, time.Now()
			p.cmd.Process.Signal(sig)
			res.Notes = append(res.Notes, fmt.Sprintf("%s: %s's wall clock by %v at %s", kind, p.node, sc.Clocks[s].Jump, time.Now().Format("15:04:05.000")))
			return true
		}
	}
	return false
}

// takeoverNote measures, for each isolation, the ids its owner had
// delivered last before it: how long until another owner delivered them
// (the stall a clock fault lengthens, liveness), and how many deliveries
// the isolated owner still made after that (stale ones: what a clock
// beyond the bounds breaks).
func takeoverNote(h history.History, isos []isolation) string {
	type dl = history.Delivery
	byID := map[string][]dl{}
	for _, d := range h.Deliveries {
		byID[d.ID] = append(byID[d.ID], d)
	}
	for _, ds := range byID {
		sort.Slice(ds, func(i, j int) bool { return ds[i].At.Before(ds[j].At) })
	}
	var gaps []time.Duration
	overlap := 0
	for _, iso := range isos {
		for _, ds := range byID {
			var last *dl
			for i := range ds {
				if ds[i].At.After(iso.at) {
					break
				}
				last = &ds[i]
			}
			if last == nil || last.Node != iso.node {
				continue
			}
			for i := range ds {
				if ds[i].At.After(iso.at) && ds[i].Epoch > last.Epoch {
					gaps = append(gaps, ds[i].At.Sub(iso.at))
					for _, o := range ds {
						if o.Node == iso.node && o.Epoch == last.Epoch && o.At.After(ds[i].At) {
							overlap++
						}
					}
					break
				}
			}
		}
	}
	if len(gaps) == 0 {
		return fmt.Sprintf("isolations %d: no id taken over", len(isos))
	}
	sort.Slice(gaps, func(i, j int) bool { return gaps[i] < gaps[j] })
	return fmt.Sprintf("isolations %d: %d ids taken over, from the cut to the new holder's first delivery min %v median %v max %v; deliveries by the cut-off holder after that: %d",
		len(isos), len(gaps), gaps[0].Round(time.Millisecond), gaps[len(gaps)/2].Round(time.Millisecond), gaps[len(gaps)-1].Round(time.Millisecond), overlap)
}

// maxSkew is the largest difference between two clocks of the run (the
// owners' faulted ones and the true clock of everything else), over the
// longest life of each owner process (a restarted process starts again
// at its spec's skew); jumps are beyond any bound and not counted here.
func maxSkew(sc scenario, lives map[int]time.Duration) time.Duration {
	lo, hi := []float64{0}, []float64{0}
	for slot, c := range sc.Clocks {
		a := float64(c.Skew)
		b := a + c.Rate*float64(lives[slot])
		lo, hi = append(lo, min(a, b)), append(hi, max(a, b))
	}
	var m float64
	for i := range lo {
		for j := range lo {
			m = max(m, hi[i]-lo[j])
		}
	}
	return time.Duration(m)
}

// checkClockBounds fails a run meant to stay within the clock bounds
// whose clocks did not (the run would prove nothing), and notes the skew.
func checkClockBounds(t testing.TB, sc scenario, res outcome) {
	t.Helper()
	if len(sc.Clocks) == 0 {
		return
	}
	skew := maxSkew(sc, res.ownerLives)
	t.Logf("%s: largest skew between two clocks %v (delta %v, rho %g)", sc.Name, skew.Round(time.Millisecond), ownership.DefaultMaxSkew, ownership.DefaultMaxDrift)
	if sc.BeyondBounds {
		return
	}
	for slot, c := range sc.Clocks {
		if c.Jump != 0 || c.Rate > ownership.DefaultMaxDrift || c.Rate < -ownership.DefaultMaxDrift {
			t.Errorf("%s: owner slot %d's clock %v is beyond the bounds in a run meant within them", sc.Name, slot, c)
		}
	}
	if skew > ownership.DefaultMaxSkew {
		t.Errorf("%s: two clocks differed by up to %v, beyond delta %v, in a run meant within the bounds (owner processes lived up to %v)", sc.Name, skew, ownership.DefaultMaxSkew, res.ownerLives)
	}
}
