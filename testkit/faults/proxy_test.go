package faults

import (
	"bufio"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// echoServer echoes every line back.
func echoServer(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, msg string) (string, error) {
	t.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(msg + "\n")); err != nil {
		return "", err
	}
	line, err := r.ReadString('\n')
	return line, err
}

// echoProxy is a proxy to an echo server, closed at the end of the test.
func echoProxy(t *testing.T) *Proxy {
	t.Helper()
	p, err := NewProxy(echoServer(t))
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	return p
}

// dialVia connects through p, closed at the end of the test.
func dialVia(t *testing.T, p *Proxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

func TestProxy_Forwards(t *testing.T) {
	p := echoProxy(t)
	c, r := dialVia(t, p)
	for _, m := range []string{"a", "bb", "ccc"} {
		got, err := roundTrip(t, c, r, m)
		require.NoError(t, err)
		require.Equal(t, m+"\n", got)
	}
	require.EqualValues(t, 1, p.Accepted.Load())
}

func TestProxy_Latency(t *testing.T) {
	p := echoProxy(t)
	c, r := dialVia(t, p)
	_, err := roundTrip(t, c, r, "warm")
	require.NoError(t, err)
	p.SetLatency(100 * time.Millisecond)
	start := time.Now()
	got, err := roundTrip(t, c, r, "slow")
	require.NoError(t, err)
	require.Equal(t, "slow\n", got)
	require.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond, "both directions delayed")
	// Order is kept under latency: many lines, each echoed in order.
	for i := 0; i < 20; i++ {
		_, err := c.Write([]byte{byte('a' + i), '\n'})
		require.NoError(t, err)
	}
	for i := 0; i < 20; i++ {
		line, err := r.ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, string([]byte{byte('a' + i), '\n'}), line)
	}
	p.SetLatency(0)
	start = time.Now()
	_, err = roundTrip(t, c, r, "fast")
	require.NoError(t, err)
	require.Less(t, time.Since(start), 100*time.Millisecond)
}

func TestProxy_CutAll(t *testing.T) {
	p := echoProxy(t)
	var conns []net.Conn
	for i := 0; i < 3; i++ {
		c, err := net.Dial("tcp", p.Addr())
		require.NoError(t, err)
		defer c.Close()
		_, err = roundTrip(t, c, bufio.NewReader(c), "x")
		require.NoError(t, err)
		conns = append(conns, c)
	}
	require.Equal(t, 3, p.CutAll())
	for _, c := range conns {
		c.SetDeadline(time.Now().Add(5 * time.Second))
		_, err := c.Read(make([]byte, 1))
		require.Error(t, err, "a cut connection ends")
		require.False(t, isTimeout(err), "ended by the cut, not by the deadline")
	}
	// New connections work again.
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c.Close()
	_, err = roundTrip(t, c, bufio.NewReader(c), "again")
	require.NoError(t, err)
}

func TestProxy_Refuse(t *testing.T) {
	p := echoProxy(t)
	p.Refuse(300 * time.Millisecond)
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	_, err = roundTrip(t, c, bufio.NewReader(c), "x")
	require.Error(t, err, "refused while refusing")
	c.Close()
	require.Eventually(t, func() bool {
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			return false
		}
		defer c.Close()
		_, err = roundTrip(t, c, bufio.NewReader(c), "y")
		return err == nil
	}, 5*time.Second, 20*time.Millisecond)
	require.GreaterOrEqual(t, p.Refused.Load(), int64(1))
}

func TestProxy_TargetDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	p, err := NewProxy(addr)
	require.NoError(t, err)
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c.Close()
	_, err = roundTrip(t, c, bufio.NewReader(c), "x")
	require.Error(t, err, "no target: the client's connection is closed")
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// TestProxy_Hold: while held, nothing arrives and the connection stays
// open; afterwards what was sent arrives, in order.
func TestProxy_Hold(t *testing.T) {
	p := echoProxy(t)
	c, r := dialVia(t, p)
	_, err := roundTrip(t, c, r, "before")
	require.NoError(t, err)
	p.Hold(time.Hour)
	_, err = c.Write([]byte("a\nb\n"))
	require.NoError(t, err)
	c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	_, err = r.ReadString('\n')
	var ne net.Error
	require.ErrorAs(t, err, &ne, "nothing passes while held")
	require.True(t, ne.Timeout())
	p.Hold(0)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for _, want := range []string{"a\n", "b\n"} {
		line, err := r.ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, want, line)
	}
	require.Zero(t, p.Cut.Load())
}

// CutAfter lets the server's next n bytes through, then cuts: what the
// client sends is echoed back until the count runs out, and the client
// reads less than the server sent, then the end of the connection.
func TestProxy_CutAfter(t *testing.T) {
	p := echoProxy(t)
	c, r := dialVia(t, p)
	got, err := roundTrip(t, c, r, "before")
	require.NoError(t, err)
	require.Equal(t, "before\n", got)
	p.CutAfter(100 << 10)
	sent := make([]byte, 1<<20)
	for i := range sent {
		sent[i] = 'x'
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	go c.Write(sent)                 // echoed back by the server; fails once cut
	n, err := io.Copy(io.Discard, r) // up to EOF or a reset
	var ne net.Error
	require.False(t, errors.As(err, &ne) && ne.Timeout(), "the end of the connection, not a timeout: %v", err)
	require.Less(t, n, int64(len(sent)), "the cut lost what the server sent after it")
	// Counted after the connections were closed: the client may see the
	// end first.
	require.Eventually(t, func() bool { return p.Cut.Load() == 1 }, 5*time.Second, time.Millisecond, "one connection cut")
	c2, r2 := dialVia(t, p)
	got, err = roundTrip(t, c2, r2, "after")
	require.NoError(t, err, "a new connection is not cut: the count fired once")
	require.Equal(t, "after\n", got)
}

// pairVia connects through p to a fresh target and returns both ends: the
// client's and the target's.
func pairVia(t *testing.T) (*Proxy, net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- c
		}
	}()
	p, err := NewProxy(ln.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	select {
	case s := <-accepted:
		t.Cleanup(func() { s.Close() })
		return p, c, s
	case <-time.After(5 * time.Second):
		t.Fatal("the proxy did not connect to the target")
		return nil, nil, nil
	}
}

// passes: what from writes reaches to within d.
func passes(t *testing.T, from, to net.Conn, msg string, d time.Duration) bool {
	t.Helper()
	_, err := from.Write([]byte(msg))
	require.NoError(t, err)
	return arrives(t, to, msg, d)
}

// arrives: msg is the next thing to reads, within d.
func arrives(t *testing.T, to net.Conn, msg string, d time.Duration) bool {
	t.Helper()
	to.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, len(msg))
	_, err := io.ReadFull(to, buf)
	if isTimeout(err) {
		return false
	}
	require.NoError(t, err)
	require.Equal(t, msg, string(buf))
	return true
}

// TestProxy_PauseOneWay: a paused direction forwards nothing until it is
// resumed, the other direction flows meanwhile, the connection stays
// open, and what was held arrives after Resume, in order.
func TestProxy_PauseOneWay(t *testing.T) {
	for _, tc := range []struct {
		name string
		dir  Direction
	}{{"to server", ToServer}, {"to client", ToClient}} {
		t.Run(tc.name, func(t *testing.T) {
			p, c, s := pairVia(t)
			require.True(t, passes(t, c, s, "up0", 5*time.Second))
			require.True(t, passes(t, s, c, "down0", 5*time.Second))
			p.Pause(tc.dir)
			heldFrom, heldTo, freeFrom, freeTo := c, s, s, c
			if tc.dir == ToClient {
				heldFrom, heldTo, freeFrom, freeTo = s, c, c, s
			}
			require.False(t, passes(t, heldFrom, heldTo, "held1", 300*time.Millisecond), "the paused direction forwards nothing")
			_, err := heldFrom.Write([]byte("held2"))
			require.NoError(t, err)
			require.True(t, passes(t, freeFrom, freeTo, "free1", 5*time.Second), "the other direction flows")
			p.Resume(BothWays &^ tc.dir) // resuming the other direction changes nothing
			require.False(t, arrives(t, heldTo, "held1", 300*time.Millisecond), "still paused")
			p.Resume(tc.dir)
			require.True(t, arrives(t, heldTo, "held1held2", 5*time.Second), "held bytes flow after Resume, in order")
			require.True(t, passes(t, heldFrom, heldTo, "after", 5*time.Second))
			require.Zero(t, p.Cut.Load())
			require.EqualValues(t, 1, p.Accepted.Load(), "one connection throughout")
		})
	}
}

// TestProxy_PauseNewConnections: a pause holds connections opened while
// it lasts too, and Close ends a proxy with held bytes.
func TestProxy_PauseNewConnections(t *testing.T) {
	p := echoProxy(t)
	p.Pause(BothWays)
	c, r := dialVia(t, p)
	_, err := c.Write([]byte("x\n"))
	require.NoError(t, err)
	c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	_, err = r.ReadString('\n')
	require.True(t, isTimeout(err), "nothing passes on a connection opened while paused: %v", err)
	p.Resume(ToServer)
	c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	_, err = r.ReadString('\n')
	require.True(t, isTimeout(err), "the echo is held on its way back: %v", err)
	_, err = c.Write([]byte("y\n"))
	require.NoError(t, err)
	done := make(chan struct{})
	go func() { p.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close waits on a paused connection")
	}
}
