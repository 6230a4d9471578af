package daemon_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDaemon_PProf: --pprof serves Go's profiles of the process on its own
// loopback listener (a heap profile names the embedded server's
// allocations), and nothing of it on the --http endpoint.
func TestDaemon_PProf(t *testing.T) {
	s := startDaemon(t, t.TempDir(), "--pprof", "127.0.0.1:0")
	s.waitReady(t)
	addr := s.d.PProfAddr()
	require.True(t, strings.HasPrefix(addr, "127.0.0.1:"), addr)
	resp, err := http.Get("http://" + addr + "/debug/pprof/heap?debug=1")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Contains(t, string(b), "# HeapInuse")
	require.Contains(t, string(b), "nats-server")
	code, _ := s.get(t, "/debug/pprof/heap")
	require.Equal(t, http.StatusNotFound, code)
}

// TestDaemon_NoPProfByDefault: without --pprof there is no listener.
func TestDaemon_NoPProfByDefault(t *testing.T) {
	s := startDaemon(t, t.TempDir())
	require.Empty(t, s.d.PProfAddr())
}
