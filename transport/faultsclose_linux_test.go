package transport

import (
	"errors"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/taskid"
)

// A connection with delayed frames that its node closes writes nothing
// once it is gone: here the GOAWAY of a node shutting down reaches the
// fault link after the connection closed (its loop was busy until then),
// and the link held it for the delay. Its release timer must not outlive
// the connection and write the GOAWAY to the descriptor gnet closed, which
// by then belongs to another socket (stood in for here by one dup2'ed
// onto the number).
func TestAClosedConnectionsHeldFramesDoNotReachAReusedDescriptor(t *testing.T) {
	const delay = 300 * time.Millisecond
	rx := listeningNode(t, nil) // keeps the loops running after tx is gone
	rx.HandleAll(func(taskid.ID) Handler { return func(taskid.Channel, uint64, []Message) {} })
	tx, err := NewNode(WithFaults(Faults{Delay: delay, Seed: 1}))
	if err != nil {
		t.Fatal(err)
	}
	p, err := tx.Peer(rx.Addr())
	if err != nil {
		tx.Abort()
		t.Fatal(err)
	}
	if err := p.WaitConnected(ctxT(t, 10*time.Second)); err != nil {
		tx.Abort()
		t.Fatal(err)
	}
	var c *conn
	for k := range conns(tx) {
		c = k
	}
	fl, ok := c.lk.(*faultLink)
	if !ok {
		tx.Abort()
		t.Fatalf("the connection's link is a %T, want a fault link", c.lk)
	}
	gl, ok := fl.link.(gnetLink)
	if !ok {
		tx.Abort()
		t.Fatalf("the fault link wraps a %T, want a gnet link", fl.link)
	}
	fd := gl.gc.Fd()
	// The frames of the handshake go out, and none is held when the
	// connection closes.
	waitFor(t, 10*time.Second, "the handshake's frames to go out", func() bool {
		done := make(chan bool, 1)
		if c.lk.Execute(func() { done <- fl.held.empty() }) != nil {
			return false
		}
		return <-done
	})
	// Hold the loop until shutdown has closed the connection, so that the
	// GOAWAY shutdown queues reaches the link after that.
	if err := c.lk.Execute(func() {
		select {
		case <-c.done:
		case <-time.After(10 * time.Second):
		}
	}); err != nil {
		tx.Abort()
		t.Fatal(err)
	}
	aborted := make(chan struct{})
	go func() { tx.Abort(); close(aborted) }()
	select {
	case <-aborted:
	case <-time.After(20 * time.Second): // hang guard
		t.Fatal("Abort has not returned")
	}
	// gnet closed fd; another socket takes the number.
	waitFor(t, 10*time.Second, "gnet to close the descriptor", func() bool {
		_, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		return errors.Is(err, unix.EBADF)
	})
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	other := pair[1]
	switch fd {
	case pair[0]: // the lowest number free took it
	case pair[1]:
		other = pair[0]
	default:
		if err := unix.Dup2(pair[0], fd); err != nil {
			t.Fatal(err)
		}
		_ = unix.Close(pair[0])
	}
	t.Cleanup(func() { _ = unix.Close(fd); _ = unix.Close(other) })
	pfd := []unix.PollFd{{Fd: int32(other), Events: unix.POLLIN}}
	n, err := unix.Poll(pfd, int((delay + time.Second).Milliseconds()))
	for errors.Is(err, unix.EINTR) {
		n, err = unix.Poll(pfd, int((delay + time.Second).Milliseconds()))
	}
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		return // nothing came, as it should be
	}
	buf := make([]byte, 256)
	n, err = unix.Read(other, buf)
	if n > 0 {
		t.Fatalf("%d bytes of the closed connection (% x) were written to the socket that reused its descriptor", n, buf[:n])
	}
	t.Fatalf("the socket that reused the descriptor: read %d, %v", n, err)
}
