package daemon_test

import (
	"io"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/daemon"
	"github.com/fencepost/fencepost/server"
)

// start is daemon.Start on argv, without running it.
func start(t *testing.T, argv ...string) (*daemon.Daemon, error) {
	t.Helper()
	cfg, err := daemon.Parse(append([]string{"--http", "off", "--log-level", "error"}, argv...), io.Discard)
	require.NoError(t, err)
	d, err := daemon.Start(cfg)
	if err == nil {
		t.Cleanup(d.Close)
	}
	return d, err
}

// TestDaemon_DataDirLocked: a second fencepostd on the same --data-dir
// fails at once, naming the process that holds it (JetStream's file store
// does not lock itself; two servers on it would corrupt it). Once the
// first one stops, the dir is free again.
func TestDaemon_DataDirLocked(t *testing.T) {
	dir := t.TempDir()
	first, err := start(t, "--port", "-1", "--data", dir)
	require.NoError(t, err)
	began := time.Now()
	_, err = start(t, "--port", "-1", "--data", dir)
	require.ErrorIs(t, err, daemon.ErrDataDirInUse)
	require.Contains(t, err.Error(), "pid "+strconv.Itoa(os.Getpid()))
	require.Less(t, time.Since(began), 5*time.Second, "refused at once, not after a timeout")
	first.Close()
	second, err := start(t, "--port", "-1", "--data", dir)
	require.NoError(t, err, "the lock goes with the process that held it")
	second.Close()
}

// TestDaemon_PortTaken: a taken client port fails at once, naming the
// address and the flag that changes it (it used to wait 30 s in silence).
func TestDaemon_PortTaken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	began := time.Now()
	_, err = start(t, "--port", strconv.Itoa(port), "--data", t.TempDir())
	require.ErrorIs(t, err, server.ErrPortInUse)
	require.Contains(t, err.Error(), "127.0.0.1:"+strconv.Itoa(port))
	require.Contains(t, err.Error(), "--port")
	require.Less(t, time.Since(began), 5*time.Second, "refused at once, not after a timeout")
}
