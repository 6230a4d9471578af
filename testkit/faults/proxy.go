// Package faults injects faults into a running fencepost deployment: a TCP
// proxy between clients and the server that cuts, delays and refuses
// connections. Its tests (faults_test.go) run producers, owner processes
// and ownership clients against a real embedded nats-server while owners
// are killed and paused, connections are cut and delayed, servers are
// crashed and restarted and cluster members are killed, and check the
// recorded history (testkit/history). docs/reliability.md has the
// figures.
package faults

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy forwards TCP connections from a local listener to a target
// address. Faults: CutAll closes every open connection (both sides see a
// reset or EOF), CutAfter does so in the middle of what the server sends,
// SetLatency delays every chunk of data in both directions (order kept),
// Hold forwards nothing for a while (connections stay open), Pause forwards
// nothing in one direction or both until Resume, Refuse closes new
// connections as soon as they are accepted for a while.
type Proxy struct {
	ln      net.Listener
	target  string
	latency atomic.Int64 // nanoseconds
	refuse  atomic.Int64 // unix nanos until which new connections are refused
	hold    atomic.Int64 // unix nanos until which no data is forwarded
	paused  atomic.Int32 // the Directions held until Resume
	// cutAfter: bytes from the server still to forward before CutAll (0:
	// none armed).
	cutAfter atomic.Int64

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup

	Accepted, Refused, Cut atomic.Int64
}

// NewProxy listens on a free loopback port and forwards to target.
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's listen address (host:port).
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// URL is a nats:// URL of the proxy.
func (p *Proxy) URL() string { return "nats://" + p.Addr() }

// SetLatency delays data in both directions by d from now on (0: none).
func (p *Proxy) SetLatency(d time.Duration) { p.latency.Store(int64(d)) }

// Hold forwards nothing, in either direction, for d: the connections stay
// open and what is sent meanwhile waits (as on a network that drops
// packets for a while and TCP resends them), then it all flows in order.
func (p *Proxy) Hold(d time.Duration) { p.hold.Store(time.Now().Add(d).UnixNano()) }

// Direction is one way through the proxy. The client is the side that
// connected to the proxy, the server the target the proxy dialed.
type Direction int32

const (
	ToServer Direction = 1 << iota // what the client sends
	ToClient                       // what the server sends
	BothWays = ToServer | ToClient
)

// Pause forwards nothing in dirs, on every connection open now or opened
// later, until Resume: the connections stay open, what is sent meanwhile
// waits and then flows in order (as Hold, with no deadline and one
// direction at a time). The proxy keeps reading what is sent in a paused
// direction until its queue of each connection is full (256 chunks), then
// the sender's writes block.
func (p *Proxy) Pause(dirs Direction) { p.paused.Or(int32(dirs)) }

// Resume ends Pause for dirs.
func (p *Proxy) Resume(dirs Direction) { p.paused.And(^int32(dirs)) }

// held says whether the direction out of src (fromServer: the server's
// bytes) forwards nothing now, and for how long at most to wait before
// asking again.
func (p *Proxy) held(fromServer bool) (bool, time.Duration) {
	dir := ToServer
	if fromServer {
		dir = ToClient
	}
	if Direction(p.paused.Load())&dir != 0 {
		return true, 5 * time.Millisecond
	}
	if until := p.hold.Load(); time.Now().UnixNano() < until {
		return true, min(time.Duration(until-time.Now().UnixNano()), 5*time.Millisecond)
	}
	return false, 0
}

// CutAfter cuts every open connection (CutAll) once the server has sent
// n more bytes through the proxy: in the middle of an answer of at least
// that size.
func (p *Proxy) CutAfter(n int64) { p.cutAfter.Store(n) }

// Refuse closes every new connection for d.
func (p *Proxy) Refuse(d time.Duration) { p.refuse.Store(time.Now().Add(d).UnixNano()) }

// CutAll closes every open connection and returns how many it closed.
func (p *Proxy) CutAll() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
		n++
	}
	p.Cut.Add(int64(n) / 2)
	return n / 2
}

// open is the number of connections the proxy forwards now.
func (p *Proxy) open() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns) / 2
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.hold.Store(0) // a held chunk would keep its pipe, and Close, waiting
	p.paused.Store(0)
	p.ln.Close()
	p.CutAll()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if time.Now().UnixNano() < p.refuse.Load() {
			p.Refused.Add(1)
			c.Close()
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// track registers conns; false if the proxy closed meanwhile.
func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *Proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
		c.Close()
	}
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	server, err := net.DialTimeout("tcp", p.target, 2*time.Second)
	if err != nil {
		client.Close()
		return
	}
	if !p.track(client, server) {
		client.Close()
		server.Close()
		return
	}
	p.Accepted.Add(1)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(server, client, false) }()
	go func() { defer wg.Done(); p.pipe(client, server, true) }()
	wg.Wait()
	p.untrack(client, server)
}

type chunk struct {
	data []byte
	due  time.Time
}

// pipe copies src to dst, each chunk held back until the latency set when
// it was read has passed; fromServer: src is the server (CutAfter counts
// its bytes). When either side fails, both are closed.
func (p *Proxy) pipe(dst, src net.Conn, fromServer bool) {
	ch := make(chan chunk, 256)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c := range ch {
			if d := time.Until(c.due); d > 0 {
				time.Sleep(d)
			}
			for held, wait := p.held(fromServer); held; held, wait = p.held(fromServer) {
				time.Sleep(wait)
			}
			if fromServer {
				if n := p.cutAfter.Load(); n > 0 && p.cutAfter.CompareAndSwap(n, max(n-int64(len(c.data)), 0)) && n <= int64(len(c.data)) {
					p.CutAll() // this chunk and what follows are lost
					continue
				}
			}
			if _, err := dst.Write(c.data); err != nil {
				dst.Close()
				src.Close()
				for range ch {
				}
				return
			}
		}
	}()
	buf := make([]byte, 32*1024)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			ch <- chunk{append([]byte(nil), buf[:n]...), time.Now().Add(time.Duration(p.latency.Load()))}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				dst.Close()
			}
			break
		}
	}
	close(ch)
	<-done
	// Half-close is not forwarded: a NATS connection that ends on one side
	// is over, so close both.
	dst.Close()
	src.Close()
}
