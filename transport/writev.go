package transport

import "golang.org/x/sys/unix"

// writeEach writes iov to fd a buffer at a time: writev where
// golang.org/x/sys/unix has none (macOS, the BSDs). Like writev it
// returns what went when the socket takes part of it, with no error, so
// that the direct writer carries the rest; it fails only when nothing
// went, or with an error other than EAGAIN and EINTR.
func writeEach(fd int, iov [][]byte) (int, error) {
	n := 0
	for _, b := range iov {
		k, err := unix.Write(fd, b)
		if err != nil {
			if n > 0 && (err == unix.EAGAIN || err == unix.EINTR) {
				return n, nil
			}
			return n, err
		}
		n += k
		if k < len(b) {
			return n, nil
		}
	}
	return n, nil
}
