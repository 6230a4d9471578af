//go:build linux && amd64

package faults

import (
	"encoding/binary"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// A faulted clock for one owner process.
//
// fencepost reads its clock with time.Now, time.Since and time.Until
// (ownership, drain and worker have no Clock to inject), and the machine's
// clock cannot be moved for one process (that needs CAP_SYS_TIME and would
// move every process on the machine). So an owner process started with
// FP_CLOCK replaces those three functions of package time, in its own
// address space only, before it does anything else: the first bytes of
// each become a jump to the functions below (linux/amd64 only). Everything
// in the process that reads the time through package time then sees the
// faulted clock: the wall clock the keeper writes into records as expiry,
// the monotonic clock it measures its authority with, the deadlines of its
// contexts. What it does not change: timers and sleeps of a given duration
// (time.NewTimer, time.After, time.Sleep), which the runtime runs on the
// true monotonic clock, so a clock whose rate is off still fires its
// renewal timers at true intervals; only its readings are off.
//
// The faulted clock, with real the true clock and t0 when it was installed:
//
//	mono(t) = real_mono(t) + rate*(t - t0)
//	wall(t) = real_wall(t) + skew + rate*(t - t0) + jump
//
// A jump (SIGUSR1 forward, SIGUSR2 back, by FP_CLOCK's jump) moves the
// wall clock only, as an NTP step or an operator's date(1) does; the
// monotonic clock never jumps, as on Linux.
//
// The owner's reports (delivery and commit times, which the history
// checker compares across processes) are taken with realNow, never with
// the faulted clock.
type clockSpec struct {
	Skew time.Duration // wall clock offset at start
	Rate float64       // rate error: +0.001 runs 0.1% fast, -0.001 slow
	Jump time.Duration // the size of a jump on SIGUSR1 (forward) / SIGUSR2 (back)
}

func (c clockSpec) String() string {
	return fmt.Sprintf("skew=%v,rate=%g,jump=%v", c.Skew, c.Rate, c.Jump)
}

func parseClockSpec(s string) (clockSpec, error) {
	var c clockSpec
	for _, kv := range strings.Split(s, ",") {
		k, v, _ := strings.Cut(kv, "=")
		var err error
		switch k {
		case "skew":
			c.Skew, err = time.ParseDuration(v)
		case "rate":
			c.Rate, err = strconv.ParseFloat(v, 64)
		case "jump":
			c.Jump, err = time.ParseDuration(v)
		default:
			err = fmt.Errorf("unknown key %q", k)
		}
		if err != nil {
			return c, fmt.Errorf("clock spec %q: %w", s, err)
		}
	}
	return c, nil
}

// fakeClockSupported: the clock scenarios run where installClock works.
const fakeClockSupported = true

var clk struct {
	spec      clockSpec
	m0        int64 // raw CLOCK_MONOTONIC at install
	startNano int64 // package time's startNano, estimated
	jump      atomic.Int64
}

// rawClock reads a clock of the kernel. time.Now is also called on the
// scheduler's stack (a timer firing runs time.sendTime there), where
// syscall.Syscall may not run: a raw system call, which clock_gettime can
// be (it never blocks).
//
//go:norace
func rawClock(id uintptr) int64 {
	var ts syscall.Timespec
	if _, _, e := syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, id, uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		panic(e)
	}
	return ts.Nano()
}

const (
	clockRealtime  = 0
	clockMonotonic = 1
)

// realNow is the true wall clock, whatever time.Now says in this process.
func realNow() time.Time { return time.Unix(0, rawClock(clockRealtime)) }

// timeMirror is package time's Time layout (wall, ext, loc).
type timeMirror struct {
	wall uint64
	ext  int64
	loc  *time.Location
}

const (
	hasMonotonic   = 1 << 63
	nsecShift      = 30
	unixToInternal = 62135596800 // seconds from year 1 to 1970
	wallToInternal = 59453308800 // seconds from year 1 to 1885 (minWall)
)

//go:norace
func fakeNow() time.Time {
	wall, mono := rawClock(clockRealtime), rawClock(clockMonotonic)
	drift := int64(clk.spec.Rate * float64(mono-clk.m0))
	wall += int64(clk.spec.Skew) + drift + clk.jump.Load()
	mono += drift
	sec := wall/1e9 + unixToInternal - wallToInternal
	nsec := wall % 1e9
	m := timeMirror{wall: hasMonotonic | uint64(sec)<<nsecShift | uint64(nsec), ext: mono - clk.startNano, loc: time.Local}
	return *(*time.Time)(unsafe.Pointer(&m))
}

func fakeSince(t time.Time) time.Duration { return fakeNow().Sub(t) }
func fakeUntil(t time.Time) time.Duration { return t.Sub(fakeNow()) }

// installClock makes this process's package time read the faulted clock.
// Call it before any other goroutine of the program reads the time.
func installClock(spec clockSpec) {
	clk.spec = spec
	m1 := rawClock(clockMonotonic)
	now := time.Now()
	m2 := rawClock(clockMonotonic)
	ext := (*timeMirror)(unsafe.Pointer(&now)).ext // monotonic reading - startNano
	clk.startNano = (m1+m2)/2 - ext
	clk.m0 = m2
	patch(time.Now, fakeNow)
	patch(time.Since, fakeSince)
	patch(time.Until, fakeUntil)
	if spec.Jump != 0 {
		sig := make(chan os.Signal, 4)
		signal.Notify(sig, syscall.SIGUSR1, syscall.SIGUSR2)
		go func() {
			for s := range sig {
				if s == syscall.SIGUSR1 {
					clk.jump.Add(int64(spec.Jump))
				} else {
					clk.jump.Add(-int64(spec.Jump))
				}
			}
		}()
	}
}

// codeOf is the entry of a func value's code.
func codeOf[F any](f F) unsafe.Pointer {
	return **(**unsafe.Pointer)(unsafe.Pointer(&f))
}

// patch overwrites the start of target's code with a jump to repl's
// (movabs r12, repl; jmp r12: R12 is a scratch register of Go's internal
// ABI, RAX and the others carry arguments). target and repl have the same
// signature, so repl takes target's arguments and returns its results as
// they are.
func patch[F any](target, repl F) {
	code := []byte{0x49, 0xBC, 0, 0, 0, 0, 0, 0, 0, 0, 0x41, 0xFF, 0xE4}
	binary.LittleEndian.PutUint64(code[2:], uint64(uintptr(codeOf(repl))))
	at := codeOf(target)
	ps := uintptr(os.Getpagesize())
	page := unsafe.Add(at, -int(uintptr(at)&(ps-1)))
	mem := unsafe.Slice((*byte)(page), 2*ps) // the jump may cross a page
	if err := syscall.Mprotect(mem, syscall.PROT_READ|syscall.PROT_WRITE|syscall.PROT_EXEC); err != nil {
		panic(fmt.Sprintf("fake clock: mprotect: %v", err))
	}
	copy(unsafe.Slice((*byte)(at), len(code)), code)
	if err := syscall.Mprotect(mem, syscall.PROT_READ|syscall.PROT_EXEC); err != nil {
		panic(fmt.Sprintf("fake clock: mprotect: %v", err))
	}
}
