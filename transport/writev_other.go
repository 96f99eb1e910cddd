//go:build !linux

package transport

// writev writes iov to fd (a direct write, direct.go): a system call per
// buffer here (writeEach).
func writev(fd int, iov [][]byte) (int, error) { return writeEach(fd, iov) }
