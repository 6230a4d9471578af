//go:build !(linux && amd64)

package faults

import (
	"errors"
	"time"
)

// The faulted clock (fakeclock_test.go) patches package time's code and
// is built for linux/amd64 only; elsewhere the clock scenarios are left out.
const fakeClockSupported = false

type clockSpec struct {
	Skew time.Duration
	Rate float64
	Jump time.Duration
}

func (c clockSpec) String() string { return "" }

func parseClockSpec(string) (clockSpec, error) {
	return clockSpec{}, errors.New("fake clock: linux/amd64 only")
}

func realNow() time.Time { return time.Now() }

func installClock(clockSpec) { panic("fake clock: linux/amd64 only") }
