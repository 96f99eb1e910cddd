package transport

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// unansweredAddr returns a loopback address where a dial hangs: a socket
// listening with a backlog of 0, whose accept queue one connection fills
// and which nothing accepts from; Linux then drops the SYNs of further
// dials.
func unansweredAddr(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	filler, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = filler.Close() })
	return addr
}

// synSent reports whether a socket of this host is sending SYNs to the
// loopback port of addr, unanswered (state SYN_SENT in /proc/net/tcp).
func synSent(t *testing.T, addr string) bool {
	t.Helper()
	_, port, _ := net.SplitHostPort(addr)
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("0100007F:%04X", p)
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 3 && f[2] == want && f[3] == "02" {
			return true
		}
	}
	return false
}

// Close cuts short a dial in progress: with a dial timeout of an hour,
// a peer whose address does not answer closes at once, its dial loop
// ended.
func TestPeerCloseCutsShortADialThatHangs(t *testing.T) {
	addr := unansweredAddr(t)
	tx := testNode(t, WithDialTimeout(time.Hour))
	p, err := tx.Peer(addr)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the peer's dial", func() bool { return synSent(t, addr) })
	closed := make(chan error, 1)
	go func() { closed <- p.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second): // hang guard
		t.Fatal("Peer.Close waits for a dial that does not end")
	}
	checkPeerGone(t, ctxT(t, 10*time.Second), tx, p)
}
