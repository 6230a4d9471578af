package wire_test

import (
	"strings"
	"testing"

	"github.com/fencepost/fencepost/internal/wire"
)

// TestBarrierKey_NoKeyFamily: the read barrier is one key of its own,
// which no key family's prefix matches (watchers and listings of records,
// cursors, locks, force keys and node leases never see it) and which is
// none of the single keys either.
func TestBarrierKey_NoKeyFamily(t *testing.T) {
	for _, p := range []string{wire.RecordPrefix, wire.CursorPrefix, wire.LockPrefix, wire.NodePrefix, wire.ForcePrefix} {
		if strings.HasPrefix(wire.BarrierKey, p) {
			t.Fatalf("barrier key %q has the prefix %q", wire.BarrierKey, p)
		}
	}
	if strings.Contains(wire.BarrierKey, ".") {
		t.Fatalf("barrier key %q has a '.': a filter of one family could match it", wire.BarrierKey)
	}
	if wire.BarrierKey == wire.WorldKey || wire.BarrierKey == wire.ResetKey {
		t.Fatalf("barrier key %q is another key", wire.BarrierKey)
	}
	if got, want := wire.BarrierSubject("w1"), wire.KeySubject("w1", wire.BarrierKey); got != want {
		t.Fatalf("BarrierSubject = %q, want %q", got, want)
	}
}
