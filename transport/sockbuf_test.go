package transport

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// withFD calls f with the descriptor of c's socket, on either backend.
func withFD(t *testing.T, c *conn, f func(fd int)) {
	t.Helper()
	if l, ok := c.lk.(*netLink); ok {
		rc, err := l.nc.(syscall.Conn).SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		if err := rc.Control(func(fd uintptr) { f(int(fd)) }); err != nil {
			t.Fatal(err)
		}
		return
	}
	c.fdMu.Lock()
	defer c.fdMu.Unlock()
	f(c.fd)
}

// socketBuffers reads the kernel's SO_RCVBUF and SO_SNDBUF of c's socket.
func socketBuffers(t *testing.T, c *conn) (rcv, snd int) {
	t.Helper()
	withFD(t, c, func(fd int) {
		var err error
		if rcv, err = unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF); err != nil {
			t.Fatal(err)
		}
		if snd, err = unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF); err != nil {
			t.Fatal(err)
		}
	})
	return rcv, snd
}

// oneConn waits up to 5 s for n's one connection to have its link, and
// returns it.
func oneConn(t *testing.T, n *Node) *conn {
	t.Helper()
	var conns []*conn
	deadline := time.Now().Add(5 * time.Second)
	for len(conns) == 0 && time.Now().Before(deadline) {
		n.mu.Lock()
		for c := range n.mu.conns {
			if c.lk != nil {
				conns = append(conns, c)
			}
		}
		n.mu.Unlock()
		time.Sleep(time.Millisecond)
	}
	if len(conns) != 1 {
		t.Fatalf("%d connections, want 1", len(conns))
	}
	return conns[0]
}

// bufferedConns connects two nodes of backend be, each with socket
// buffers of size, and returns both ends of their connection: the
// accepted one and the dialed one.
func bufferedConns(t *testing.T, be []Option, size int) []*conn {
	t.Helper()
	rx, tx, p := newPairOn(t, be, []Option{WithSocketBuffers(size)}, []Option{WithSocketBuffers(size)})
	if err := p.WaitConnected(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	return []*conn{oneConn(t, rx), oneConn(t, tx)}
}

// Both ends of a connection, dialed and accepted, on either backend, get
// the socket buffers WithSocketBuffers asks for (Linux reports twice the
// size asked, the rest being its bookkeeping).
func TestSocketBuffersAreSetOnBothEnds(t *testing.T) {
	forPlainBackends(t, func(t *testing.T, be []Option) {
		const size = 96 << 10
		for _, c := range bufferedConns(t, be, size) {
			if rcv, snd := socketBuffers(t, c); rcv != 2*size || snd != 2*size {
				t.Errorf("SO_RCVBUF %d, SO_SNDBUF %d; want %d each", rcv, snd, 2*size)
			}
		}
	})
}

func TestSocketBuffersMustNotBeNegative(t *testing.T) {
	_, err := NewNode(WithSocketBuffers(-1))
	if err == nil || !strings.Contains(err.Error(), "socket buffers") {
		t.Fatalf("a negative socket buffer size: got %v, want an error naming it", err)
	}
}
