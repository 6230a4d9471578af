package bench

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"time"
)

// costMeter samples what a side's rounds cost, so that the report can say
// what one delivered message costs on each side: the machine's CPU time
// (every process on it: the server, the owner processes, the producers,
// other work on a shared machine) and the messages clients sent the server
// (posts, requests, acks, pulls: each a request to the server), counted by
// the embedded server. Both are zero where they cannot be read (not
// Linux; a server of the caller's).
type costMeter struct {
	inMsgs func() int64 // nil: unknown
}

type costSample struct {
	cpu time.Duration
	in  int64
}

func (m *costMeter) sample() costSample {
	var c costSample
	if m == nil {
		return c
	}
	c.cpu = machineCPU()
	if m.inMsgs != nil {
		c.in = m.inMsgs()
	}
	return c
}

// add adds the cost from a to b to the side.
func (s *side) addCost(a, b costSample) {
	s.cpu += b.cpu - a.cpu
	s.inMsgs += b.in - a.in
}

// costPerMsg is the side's CPU microseconds and server requests per
// delivered message (0 where unknown).
func (s *side) costPerMsg() (cpuUs, requests float64) {
	if s.delivered <= 0 {
		return 0, 0
	}
	n := float64(s.delivered)
	return round(float64(s.cpu.Microseconds())/n, 1), round(float64(s.inMsgs)/n, 3)
}

// ownersCPUPerMsg is the owner processes' CPU microseconds per delivered
// message (0 without owners).
func (s *side) ownersCPUPerMsg() float64 {
	if s.delivered <= 0 {
		return 0
	}
	return round(float64(s.ownersCPU.Microseconds())/float64(s.delivered), 1)
}

// machineCPU is the CPU time the machine spent outside idle since boot
// (Linux /proc/stat, in USER_HZ ticks of 10 ms), or 0.
func machineCPU() time.Duration {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return 0
	}
	fields := strings.Fields(sc.Text())
	if len(fields) < 9 || fields[0] != "cpu" {
		return 0
	}
	var ticks uint64
	// user nice system idle iowait irq softirq steal: all but idle, iowait
	for i, v := range fields[1:9] {
		if i == 3 || i == 4 {
			continue
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}
