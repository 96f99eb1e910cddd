package transport

import "golang.org/x/sys/unix"

// writev writes iov to fd with one system call (a direct write, direct.go).
func writev(fd int, iov [][]byte) (int, error) { return unix.Writev(fd, iov) }
