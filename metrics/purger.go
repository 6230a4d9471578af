package metrics

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Purger counts the cursor entries that fencepostd's purger (the server's
// purge of committed messages in purge=server worlds) refused. Every method
// is safe on a nil *Purger.
type Purger struct {
	badKeys, forged *prometheus.CounterVec
}

// NewPurger makes a Purger and registers it on reg (nil: not registered).
// When reg already holds the purger's counters (a second daemon of the
// process serving the same registry), the Purger shares them.
func NewPurger(reg prometheus.Registerer) *Purger {
	counter := func(name, help string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help}, []string{"world"})
		if reg == nil {
			return c
		}
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				if existing, ok := are.ExistingCollector.(*prometheus.CounterVec); ok {
					return existing
				}
			}
			panic(err)
		}
		return c
	}
	return &Purger{
		badKeys: counter("purger_bad_cursor_keys_total", "Cursor key revisions the purger refused because the key's token is no id's canonical encoding (e.g. a literal c.*); nothing was purged for them, a WARN names the key."),
		forged:  counter("purger_forged_cursors_total", "Cursor revisions the purger refused because their seq is above the mailbox stream's last sequence; nothing was purged, the key was restored or deleted, a WARN names it."),
	}
}

// BadCursorKey counts a refused cursor key revision.
func (p *Purger) BadCursorKey(world string) {
	if p != nil {
		p.badKeys.WithLabelValues(world).Inc()
	}
}

// ForgedCursor counts a refused forged cursor revision.
func (p *Purger) ForgedCursor(world string) {
	if p != nil {
		p.forged.WithLabelValues(world).Inc()
	}
}
