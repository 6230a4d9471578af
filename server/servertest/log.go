package servertest

import (
	"fmt"
	"sync"
	"testing"
)

// serverLog keeps a server's warnings and errors and prints them when the
// test fails: a cause on the broker's side (a store that could not be
// created, a route that dropped) is otherwise invisible in a CI log.
// Notices, debug and trace lines are dropped.
type serverLog struct {
	name  string
	mu    sync.Mutex
	lines []string
}

// maxServerLogLines bounds what a long test keeps; the newest lines win.
const maxServerLogLines = 200

// keepServerLog gives cfg a log that t prints if it fails.
func keepServerLog(t testing.TB, name string) *serverLog {
	l := &serverLog{name: name}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, line := range l.lines {
			t.Logf("server %s: %s", l.name, line)
		}
	})
	return l
}

func (l *serverLog) add(level, format string, v []any) {
	line := level + " " + fmt.Sprintf(format, v...)
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.lines) == maxServerLogLines {
		l.lines = append(l.lines[:0], l.lines[1:]...)
	}
	l.lines = append(l.lines, line)
}

func (l *serverLog) Noticef(string, ...any)         {}
func (l *serverLog) Debugf(string, ...any)          {}
func (l *serverLog) Tracef(string, ...any)          {}
func (l *serverLog) Warnf(format string, v ...any)  { l.add("[WRN]", format, v) }
func (l *serverLog) Errorf(format string, v ...any) { l.add("[ERR]", format, v) }
func (l *serverLog) Fatalf(format string, v ...any) { l.add("[FTL]", format, v) }
