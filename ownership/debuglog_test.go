package ownership_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencepost/fencepost/ownership"
	"github.com/fencepost/fencepost/testkit/testutil"
	"github.com/fencepost/fencepost/world"
)

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuf) lines() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Split(strings.TrimSpace(b.b.String()), "\n")
}

// countingHandler is off (Enabled false) and counts how often it was asked.
type countingHandler struct {
	mu      sync.Mutex
	enabled int
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.enabled++
	return false
}
func (h *countingHandler) Handle(context.Context, slog.Record) error { panic("logged while off") }
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler        { return h }
func (h *countingHandler) WithGroup(string) slog.Handler             { return h }

// TestDebugLog: with debug logging on every lease read and write is logged
// with its outcome; with it off nothing reaches the handler.
func TestDebugLog(t *testing.T) {
	env := testutil.Start(t, testutil.Targets()[0])
	w := env.World(t, world.Config{})
	ctx := testutil.Ctx(t, time.Minute)

	var buf syncBuf
	s, err := ownership.New(w.World, ownership.WithLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	require.NoError(t, err)
	ss, err := s.OpenSession(ctx, "n", 400*time.Millisecond)
	require.NoError(t, err)
	_, err = ss.Claim(ctx, "backed")
	require.NoError(t, err)
	_, err = s.Owner(ctx, "backed")
	require.NoError(t, err)
	l, err := s.Claim(ctx, "plain", "n", 400*time.Millisecond)
	require.NoError(t, err)
	k, err := s.Keep(l)
	require.NoError(t, err)
	testutil.WaitFor(t, 5*time.Second, "renewals", func() bool { return k.Renewals() >= 1 && ss.Renewals() >= 1 })
	require.NoError(t, k.Release(ctx))
	require.NoError(t, ss.CloseContext(ctx))

	want := map[string]bool{
		"lease node-read":    false, // node lease read at open
		"lease node-claim":   false,
		"lease claim":        false,
		"lease read":         false,
		"lease renew":        false, // the id keeper
		"lease node-renew":   false, // the session keeper
		"lease release":      false,
		"lease node-release": false,
	}
	for _, line := range buf.lines() {
		require.Contains(t, line, "level=DEBUG")
		require.True(t, strings.Contains(line, "outcome=") || strings.Contains(line, "rev=") || strings.Contains(line, "error="), "no outcome: %s", line)
		for m := range want {
			if strings.Contains(line, `msg="`+m+`"`) {
				want[m] = true
			}
		}
	}
	for m, seen := range want {
		require.True(t, seen, "no %q line in:\n%s", m, strings.Join(buf.lines(), "\n"))
	}

	off := &countingHandler{}
	s2, err := ownership.New(w.World, ownership.WithLogger(slog.New(off)))
	require.NoError(t, err)
	_, err = s2.Claim(ctx, "quiet", "n", time.Minute)
	require.NoError(t, err)
	_, err = s2.Owner(ctx, "quiet")
	require.NoError(t, err)
	require.Positive(t, off.enabled, "the level is checked")
}
