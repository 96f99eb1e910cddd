package transport

import (
	"testing"

	"golang.org/x/sys/unix"
)

// The socket buffers are set before the connection opens, on both ends
// and both backends, so that the window each end offers at the handshake,
// which the other sizes its segments by, is what the buffer can hold. Set
// after the handshake (as they were), an 8 KiB buffer offered 64 KiB: the
// peer built 32-40 KiB segments that the window, about 15 KiB once the
// buffer had its size, could never take whole, and sent them only as the
// zero-window probes' backoff allowed. Two nodes opening 3,000 channels at
// once with 8 KiB buffers then stalled for over a minute, in one run of
// five to thirteen with the CPUs busy.
func TestSmallSocketBuffersShapeTheWindowFromTheHandshake(t *testing.T) {
	forPlainBackends(t, func(t *testing.T, be []Option) {
		const size = 8 << 10
		for _, c := range bufferedConns(t, be, size) {
			withFD(t, c, func(fd int) {
				ti, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
				if err != nil {
					t.Fatal(err)
				}
				// Linux reserves twice the size asked; the peer's
				// window cannot pass what its buffer holds.
				if ti.Snd_wnd > 2*size || ti.Snd_mss > size {
					t.Errorf("the peer offers a window of %d bytes and this end sends segments of %d, with %d-byte buffers on both",
						ti.Snd_wnd, ti.Snd_mss, size)
				}
			})
		}
	})
}
