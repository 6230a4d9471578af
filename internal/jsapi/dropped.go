package jsapi

import (
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"
)

// A connection's drops, as a read waiting for its answer needs them: a
// channel that is closed when the connection next drops. The server sends
// an answer to whoever subscribes to its reply subject at that moment, so
// what it sends while the client is away is lost; a read that waits on
// past a drop waits for its timeout (Timeout, 5 s, or the caller's
// deadline) for an answer that may never come. With the channel it stops
// waiting at the drop instead (DirectGet).
//
// One goroutine per connection follows its status (nats.go's
// StatusChanged) and ends when the connection closes; a read only loads a
// pointer, so the hot path pays no allocation for it.

// drops maps each *nats.Conn a read has used to its *dropWatch.
var drops sync.Map

type dropWatch struct {
	next atomic.Pointer[dropSignal]
}

// dropSignal's ch is closed at the connection's next drop.
type dropSignal struct{ ch chan struct{} }

// nextDrop returns a channel closed when nc next drops (it reconnects, or
// closes) after this call; in the moment a drop is being noted, the one
// before it (a needless early end, never a missed one).
func nextDrop(nc *nats.Conn) <-chan struct{} {
	if w, ok := drops.Load(nc); ok {
		return w.(*dropWatch).next.Load().ch
	}
	w := &dropWatch{}
	w.next.Store(&dropSignal{ch: make(chan struct{})})
	if v, loaded := drops.LoadOrStore(nc, w); loaded {
		return v.(*dropWatch).next.Load().ch
	}
	st := nc.StatusChanged(nats.RECONNECTING, nats.DISCONNECTED, nats.CLOSED)
	go w.follow(nc, st)
	return w.next.Load().ch
}

// follow closes the current signal at each drop of nc and makes the next
// one; it ends, and forgets nc, when nc is closed.
func (w *dropWatch) follow(nc *nats.Conn, st chan nats.Status) {
	defer func() {
		nc.RemoveStatusListener(st)
		drops.Delete(nc)
		close(w.next.Load().ch)
	}()
	if nc.IsClosed() { // closed before the listener was in place
		return
	}
	for s := range st {
		if s == nats.CLOSED || nc.IsClosed() {
			return
		}
		old := w.next.Swap(&dropSignal{ch: make(chan struct{})})
		close(old.ch)
	}
}
