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
