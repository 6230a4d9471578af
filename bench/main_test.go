package bench_test

import (
	"os"
	"testing"

	"github.com/fencepost/fencepost/bench"
)

// TestMain lets the takeover and handoff tests start this test binary as
// their owner processes (bench.OwnerEnv).
func TestMain(m *testing.M) {
	if bench.IsOwnerProcess() {
		os.Exit(bench.OwnerMain())
	}
	os.Exit(m.Run())
}
