package jsapi

import (
	"context"
	"fmt"
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
// waiting at the drop instead (DirectGet, and request for the reads of
// one message).
//
// One goroutine per connection follows its status (nats.go's
// StatusChanged) and ends when the connection closes; a read only loads a
// pointer, so the hot path pays no allocation for it.

// drops maps each *nats.Conn a read has used to its *dropWatch.
var drops sync.Map

type dropWatch struct {
	next atomic.Pointer[dropSignal]
}

// dropSignal's context is cancelled at the connection's next drop. A
// context rather than a channel, so that a request can end with it through
// context.AfterFunc, which starts no goroutine for a cancellable parent.
type dropSignal struct {
	ctx    context.Context
	cancel context.CancelFunc
}

func newDropSignal() *dropSignal {
	ctx, cancel := context.WithCancel(context.Background())
	return &dropSignal{ctx, cancel}
}

// nextDrop returns a channel closed when nc next drops (it reconnects, or
// closes) after this call; in the moment a drop is being noted, the one
// before it (a needless early end, never a missed one).
func nextDrop(nc *nats.Conn) <-chan struct{} { return dropContext(nc).Done() }

// dropContext is nextDrop as a context, cancelled at the drop.
func dropContext(nc *nats.Conn) context.Context {
	if w, ok := drops.Load(nc); ok {
		return w.(*dropWatch).next.Load().ctx
	}
	w := &dropWatch{}
	w.next.Store(newDropSignal())
	if v, loaded := drops.LoadOrStore(nc, w); loaded {
		return v.(*dropWatch).next.Load().ctx
	}
	st := nc.StatusChanged(nats.RECONNECTING, nats.DISCONNECTED, nats.CLOSED)
	go w.follow(nc, st)
	return w.next.Load().ctx
}

// errDropped is the cause request gives the request it ends at a drop.
var errDropped = fmt.Errorf("the connection dropped while the answer was awaited: %w", ErrIncomplete)

// request sends a request of one answer (nats.go's, through its shared
// reply subscription) and waits for the answer, ctx's end or nc's next
// drop, whichever comes first: an answer the server sends while the client
// is away is lost, and a request that waited on past the drop waited for
// its timeout (5 s without a deadline) for nothing. A request ended at
// the drop is ErrIncomplete; nothing it asked for was done by halves (it
// reads), so the caller may ask again.
func request(ctx context.Context, nc *nats.Conn, subj string, data []byte) (*nats.Msg, error) {
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// Taken before the request goes out: a drop after it may have lost
	// the answer.
	stop := context.AfterFunc(dropContext(nc), func() { cancel(errDropped) })
	defer stop()
	m, err := nc.RequestWithContext(rctx, subj, data)
	if err != nil && ctx.Err() == nil && context.Cause(rctx) == errDropped {
		return nil, errDropped
	}
	return m, err
}

// follow closes the current signal at each drop of nc and makes the next
// one; it ends, and forgets nc, when nc is closed.
func (w *dropWatch) follow(nc *nats.Conn, st chan nats.Status) {
	defer func() {
		nc.RemoveStatusListener(st)
		drops.Delete(nc)
		w.next.Load().cancel()
	}()
	if nc.IsClosed() { // closed before the listener was in place
		return
	}
	for s := range st {
		if s == nats.CLOSED || nc.IsClosed() {
			return
		}
		old := w.next.Swap(newDropSignal())
		old.cancel()
	}
}
