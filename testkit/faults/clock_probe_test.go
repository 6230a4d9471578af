package faults

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// clockProbeMain is a process with a faulted clock (FP_CLOCK) that answers
// what its clock reads: on each line of stdin, "<time.Now> <real now>
// <time.Since(start)> <time.Until(start+1h)>" in nanoseconds.
func clockProbeMain() int {
	spec, err := parseClockSpec(os.Getenv("FP_CLOCK"))
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	installClock(spec)
	start := time.Now()
	sc := bufio.NewScanner(os.Stdin)
	fmt.Println("READY")
	for sc.Scan() {
		fmt.Println(time.Now().UnixNano(), realNow().UnixNano(), int64(time.Since(start)), int64(time.Until(start.Add(time.Hour))))
	}
	return 0
}

// TestFakeClock checks the faulted clock the clock scenarios give owner
// processes: skew and rate of its wall clock, rate of its monotonic
// clock (time.Since, time.Until), and jumps of the wall clock only.
func TestFakeClock(t *testing.T) {
	if !fakeClockSupported {
		t.Skip("the faulted clock patches package time on linux/amd64 only")
	}
	cmd, err := selfCmd(envRole+"=clockprobe", "FP_CLOCK=skew=-3s,rate=0.5,jump=10s")
	require.NoError(t, err)
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	outp, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	out := bufio.NewReader(outp)
	line, err := out.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "READY", strings.TrimSpace(line))
	ask := func() (now, real, since, until int64) {
		_, err := in.Write([]byte("?\n"))
		require.NoError(t, err)
		line, err := out.ReadString('\n')
		require.NoError(t, err)
		f := strings.Fields(line)
		require.Len(t, f, 4)
		v := make([]int64, 4)
		for i := range f {
			v[i], err = strconv.ParseInt(f[i], 10, 64)
			require.NoError(t, err)
		}
		return v[0], v[1], v[2], v[3]
	}
	now1, real1, since1, until1 := ask()
	require.InDelta(t, -3*time.Second, now1-real1, float64(100*time.Millisecond), "skew")
	// 400 ms of true time: the faulted clock runs 1.5x.
	time.Sleep(400 * time.Millisecond) // the time that passes is what is measured
	now2, real2, since2, until2 := ask()
	trueDt := real2 - real1
	require.InDelta(t, 1.5*float64(trueDt), float64(now2-now1), float64(50*time.Millisecond), "wall rate")
	require.InDelta(t, 1.5*float64(trueDt), float64(since2-since1), float64(50*time.Millisecond), "monotonic rate (Since)")
	require.InDelta(t, -1.5*float64(trueDt), float64(until2-until1), float64(50*time.Millisecond), "monotonic rate (Until)")

	// A jump forward moves the wall clock, not the monotonic one.
	require.NoError(t, cmd.Process.Signal(syscall.SIGUSR1))
	var now3, real3, since3 int64
	require.True(t, waitUntil(5*time.Second, func() bool {
		now3, real3, since3, _ = ask()
		return now3-real3 > int64(5*time.Second)
	}), "jump forward seen")
	require.InDelta(t, 1.5*float64(real3-real2), float64(since3-since2), float64(50*time.Millisecond), "no jump of the monotonic clock")
	require.NoError(t, cmd.Process.Signal(syscall.SIGUSR2))
	require.True(t, waitUntil(5*time.Second, func() bool {
		now3, real3, _, _ = ask()
		return now3-real3 < int64(5*time.Second)
	}), "jump back seen")
}
