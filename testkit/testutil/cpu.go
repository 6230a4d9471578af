//go:build unix

package testutil

import (
	"syscall"
	"time"
)

// ProcessCPU is the CPU time this process used (user and system): with an
// embedded server, the server's and every client's in it. Benchmarks report
// it per operation (cpu-us/op) beside the wall time, which a shared machine
// makes noisy.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
