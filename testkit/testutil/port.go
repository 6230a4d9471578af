package testutil

import (
	"fmt"
	"math/rand/v2"
	"net"
	"testing"
)

// Free ports are picked below Linux's default ephemeral range (32768 to
// 60999). A port the kernel gave a listener on :0 and that was closed
// again is free for the kernel to give any other socket at once: another
// listener on :0, or the local end of any outgoing connection of the test
// binaries running beside it. The fault suite lost a run that way ("the
// cluster port ... is in use", CI, 6 Dec 2026). A port below the range
// is never handed out by the kernel, only taken by whoever asks for it.
const (
	portLow  = 20000
	portHigh = 32767
)

// FreePort is a TCP port on 127.0.0.1 that nothing listened on a moment
// ago, below the kernel's ephemeral range, for a server the test starts
// next (a cluster's route port, a member's client port) whose address
// must be known before it starts.
func FreePort(t testing.TB) int {
	t.Helper()
	for range 100 {
		port := portLow + rand.IntN(portHigh-portLow+1)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue // taken: another
		}
		l.Close()
		return port
	}
	t.Fatalf("no free port in %d..%d after 100 tries", portLow, portHigh)
	return 0
}
