//go:build !unix

package testutil

import "time"

// ProcessCPU is 0 where getrusage is not available (see cpu.go).
func ProcessCPU() time.Duration { return 0 }
