package bench

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// gateWriter records each write; its first write waits for release.
type gateWriter struct {
	mu      sync.Mutex
	writes  []string
	entered chan struct{}
	release chan struct{}
	fail    error
}

func (g *gateWriter) Write(b []byte) (int, error) {
	g.mu.Lock()
	first := len(g.writes) == 0
	g.writes = append(g.writes, string(b))
	g.mu.Unlock()
	if first {
		close(g.entered)
		<-g.release
	}
	return len(b), g.fail
}

func (g *gateWriter) all() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.writes...)
}

// The lines that come while a write is under way go out together in the
// next write, and no call returns before its line was written.
func TestLineWriter_GroupsLinesAndReturnsAfterTheirWrite(t *testing.T) {
	g := &gateWriter{entered: make(chan struct{}), release: make(chan struct{})}
	lw := newLineWriter(g)
	first := make(chan error, 1)
	go func() { first <- lw.write([]byte("d first\n")) }()
	<-g.entered

	const n = 10
	returned := make(chan string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			line := fmt.Sprintf("d %d\n", i)
			assert.NoError(t, lw.write([]byte(line)))
			// Returned: the line must be in a write made already.
			assert.Contains(t, strings.Join(g.all(), ""), line)
			returned <- line
		})
	}
	require.Eventually(t, func() bool {
		lw.mu.Lock()
		defer lw.mu.Unlock()
		return strings.Count(string(lw.buf), "\n") == n
	}, 10*time.Second, time.Millisecond, "the lines wait for the write under way")
	require.Empty(t, returned, "a call returned before its line was written")
	close(g.release)
	require.NoError(t, <-first)
	wg.Wait()

	writes := g.all()
	require.Len(t, writes, 2, "the waiting lines go out in one write")
	require.Equal(t, "d first\n", writes[0])
	require.Equal(t, n, strings.Count(writes[1], "\n"))
	for i := range n {
		require.Contains(t, writes[1], fmt.Sprintf("d %d\n", i))
	}
}

// A failed write fails its call, and every later one, without writing.
func TestLineWriter_AFailureSticks(t *testing.T) {
	g := &gateWriter{entered: make(chan struct{}), release: make(chan struct{}), fail: errors.New("broken pipe")}
	close(g.release)
	lw := newLineWriter(g)
	require.ErrorContains(t, lw.write([]byte("d a\n")), "broken pipe")
	require.ErrorContains(t, lw.write([]byte("d b\n")), "broken pipe")
	require.Len(t, g.all(), 1)
}
