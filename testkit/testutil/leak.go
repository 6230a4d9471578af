package testutil

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// VerifyNoLeaks runs the tests and then fails the run if a goroutine started
// by fencepost's own code (a function of this module on its stack, other than
// the test runner's) is still alive after a grace period. nats-server and
// nats.go goroutines are not ours to judge: their lifetime ends with the
// servers and connections the tests close.
//
//	func TestMain(m *testing.M) { testutil.VerifyNoLeaks(m) }
func VerifyNoLeaks(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaked := waitOwnGoroutines(5 * time.Second); leaked != "" {
			fmt.Fprintf(os.Stderr, "goroutines leaked by fencepost code:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

func waitOwnGoroutines(grace time.Duration) string {
	deadline := time.Now().Add(grace)
	for {
		leaked := ownGoroutines()
		if leaked == "" || time.Now().After(deadline) {
			return leaked
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func ownGoroutines() string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var leaked []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if !strings.Contains(g, "github.com/fencepost/fencepost/") {
			continue
		}
		if strings.Contains(g, "testutil.ownGoroutines") || strings.Contains(g, "testing.(*M).Run") ||
			strings.Contains(g, "testutil.VerifyNoLeaks") {
			continue
		}
		leaked = append(leaked, g)
	}
	return strings.Join(leaked, "\n\n")
}
