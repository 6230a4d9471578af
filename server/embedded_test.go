package server_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/server"
)

// recordingLog keeps every notice the server logs.
type recordingLog struct {
	mu      sync.Mutex
	notices []string
}

func (l *recordingLog) Noticef(format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.notices = append(l.notices, fmt.Sprintf(format, v...))
}
func (l *recordingLog) Warnf(string, ...any)  {}
func (l *recordingLog) Fatalf(string, ...any) {}
func (l *recordingLog) Errorf(string, ...any) {}
func (l *recordingLog) Debugf(string, ...any) {}
func (l *recordingLog) Tracef(string, ...any) {}

// TestStart_Logger: a Config.Logger gets the server's own lines from its
// start on (servertest keeps them to print when a test fails).
func TestStart_Logger(t *testing.T) {
	l := &recordingLog{}
	s, err := server.Start(server.Config{StoreDir: t.TempDir(), Port: -1, Logger: l})
	require.NoError(t, err)
	t.Cleanup(s.Stop)
	l.mu.Lock()
	defer l.mu.Unlock()
	require.True(t, strings.Contains(strings.Join(l.notices, "\n"), "Server is ready"),
		"the logger got no start lines: %q", l.notices)
}
