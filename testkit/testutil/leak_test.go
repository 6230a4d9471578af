package testutil

import (
	"strings"
	"testing"
	"time"
)

// The checker must see a goroutine of this module that is still running.
func TestOwnGoroutines_SeesALeak(t *testing.T) {
	stop := make(chan struct{})
	go leakyLoop(stop)
	got := waitOwnGoroutines(50 * time.Millisecond)
	close(stop)
	if !strings.Contains(got, "leakyLoop") {
		t.Fatalf("leak not reported; got %q", got)
	}
	if got := waitOwnGoroutines(2 * time.Second); got != "" {
		t.Fatalf("stopped goroutine still reported: %s", got)
	}
}

func leakyLoop(stop chan struct{}) { <-stop }
