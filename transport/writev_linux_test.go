package transport

import (
	"bytes"
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

// TestWriteEachIsWritevWhereThereIsNone checks the writer that stands in
// for writev off Linux against what writev promises the direct writer: the
// bytes that went are a prefix of the buffers, in order; a socket that takes
// part of them returns that part and no error; a full socket returns
// EAGAIN with nothing written; a closed peer fails.
func TestWriteEachIsWritevWhereThereIsNone(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	w, r := fds[0], fds[1]
	defer unix.Close(w)
	if err := unix.SetsockoptInt(w, unix.SOL_SOCKET, unix.SO_SNDBUF, 4096); err != nil {
		t.Fatal(err)
	}
	iov := [][]byte{bytes.Repeat([]byte("a"), 100), {}, bytes.Repeat([]byte("b"), 1<<20), []byte("c")}
	var want []byte
	for _, b := range iov {
		want = append(want, b...)
	}

	n, err := writeEach(w, iov)
	if err != nil || n <= 100 || n >= len(want) {
		t.Fatalf("writeEach into a small socket = %d, %v; want part of the second buffer and no error", n, err)
	}
	if k, err := writeEach(w, iov); k != 0 || !errors.Is(err, unix.EAGAIN) {
		t.Fatalf("writeEach into a full socket = %d, %v; want 0, EAGAIN", k, err)
	}
	got := make([]byte, 0, n)
	buf := make([]byte, 64<<10)
	for len(got) < n {
		k, err := unix.Read(r, buf)
		if err != nil {
			t.Fatalf("reading what went: %v after %d of %d bytes", err, len(got), n)
		}
		got = append(got, buf[:k]...)
	}
	if !bytes.Equal(got, want[:n]) {
		t.Fatalf("the %d bytes that went are not the buffers' first %d", len(got), n)
	}

	if err := unix.Close(r); err != nil {
		t.Fatal(err)
	}
	if k, err := writeEach(w, [][]byte{[]byte("x")}); err == nil || errors.Is(err, unix.EAGAIN) {
		t.Fatalf("writeEach to a closed peer = %d, %v; want a failure", k, err)
	}
}
