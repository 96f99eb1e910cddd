package transport

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bench"
	"golang.org/x/sys/unix"
)

// The latency baselines: what plain TCP on this machine does with the same
// load, measured in the same run as the transport's latency benchmarks. Each
// message is a 100-byte frame whose first 8 bytes carry its intended send
// time; the writer writes each message with one write system call (the best
// latency plain TCP offers), and the reader reads frames with io.ReadFull.

// plainTCPPair returns two ends of a loopback TCP connection, closed when
// the benchmark ends.
func plainTCPPair(b *testing.B) (client, server *net.TCPConn) {
	client, server, err := bench.TCPPair()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// BenchmarkPlainTCPPingPong is the baseline of BenchmarkTransportPingPong:
// a 100-byte message there and back over one loopback connection
// (bench.Pinger, bench.Echo, which loadgen bench runs too).
func BenchmarkPlainTCPPingPong(b *testing.B) { benchPlainTCPPingPong(b, bench.Echo, bench.NewPinger) }

// BenchmarkPlainTCPPingPongHandOff is BenchmarkPlainTCPPingPong with the
// hand-offs a node's delivery makes: each end reads every message on one
// goroutine and answers it on another (bench.NewHandOffPinger,
// bench.EchoHandOff), as the transport's echo task answers a ping its
// connection's loop read, and its pinger takes each pong from the loop.
func BenchmarkPlainTCPPingPongHandOff(b *testing.B) {
	benchPlainTCPPingPong(b, bench.EchoHandOff, bench.NewHandOffPinger)
}

func benchPlainTCPPingPong(b *testing.B, echo func(io.ReadWriter, int) error, newPinger func(io.ReadWriter, int) (*bench.Pinger, error)) {
	c, s := plainTCPPair(b)
	go func() { _ = echo(s, benchSize) }()
	p, err := newPinger(c, benchSize)
	if err != nil {
		b.Fatal(err)
	}
	rtts := make([]time.Duration, 0, b.N)
	for b.Loop() {
		rtt, err := p.Ping()
		if err != nil {
			b.Fatal(err)
		}
		rtts = append(rtts, rtt)
	}
	reportPercentiles(b, rtts)
}

// BenchmarkPlainTCPFixedRate100k is the baseline of
// BenchmarkTransportFixedRate100k: the same driver and clock send 100-byte
// messages at 100,000 msgs/s, one write each, and the reader records the
// latency from each message's intended send time (bench.ReadStamped, which
// loadgen bench runs too).
func BenchmarkPlainTCPFixedRate100k(b *testing.B) {
	c, s := plainTCPPair(b)
	rec := bench.NewRecorder()
	type read struct {
		d   bench.Delivery
		err error
	}
	done := make(chan read, 1)
	go func() {
		d, err := bench.ReadStamped(s, benchSize, rec)
		done <- read{d, err}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	msg := make([]byte, benchSize)
	driveFixedRate(ctx, b, 100_000, func(_ context.Context, i int64, intended int64) error {
		bench.Stamp(msg, intended, uint64(i))
		_, err := c.Write(msg)
		return err
	})
	c.CloseWrite()
	r := <-done
	if r.err != nil {
		b.Fatal(r.err)
	}
	if !r.d.ExactlyOnce(int64(b.N)) {
		b.Fatalf("received %+v of %d messages", r.d, b.N)
	}
	l := rec.Latency()
	b.ReportMetric(l.P50, "p50-µs")
	b.ReportMetric(l.P99, "p99-µs")
	b.ReportMetric(l.P999, "p99.9-µs")
}

// BenchmarkFixedRate100kDriverAlone is the floor under both fixed-rate
// benchmarks: the same driver and clock at 100,000 msgs/s sending nothing,
// recording how late it hands each message over (Now() - intended). A
// latency figure cannot be better than this on the machine it ran on.
func BenchmarkFixedRate100kDriverAlone(b *testing.B) {
	lat := make([]time.Duration, 0, b.N)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	driveFixedRate(ctx, b, 100_000, func(_ context.Context, _ int64, intended int64) error {
		lat = append(lat, time.Duration(bench.Now()-intended))
		return nil
	})
	reportPercentiles(b, lat)
}

// BenchmarkRawSocketFixedRate100k is the best case this machine allows at
// 100,000 msgs/s, with nothing of Go's scheduler or timers in the way: the
// sender sleeps in nanosleep on its own locked thread with a timer slack of
// 1 ns and writes each 100-byte message with one write system call; the
// receiver, on its own locked thread, reads the socket without blocking and
// spins for 50 µs after each read before it waits in epoll_wait. Its
// percentiles bound what any transport can show here.
func BenchmarkRawSocketFixedRate100k(b *testing.B) {
	c, s := plainTCPPair(b)
	wfd, rfd := rawFD(b, c), rawFD(b, s)
	n := b.N
	lat := make([]time.Duration, 0, n)
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
		if err != nil {
			done <- err
			return
		}
		defer unix.Close(ep)
		if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, rfd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(rfd)}); err != nil {
			done <- err
			return
		}
		evs := make([]unix.EpollEvent, 1)
		buf := make([]byte, 64<<10)
		var pending []byte
		idleSince := bench.Now()
		for len(lat) < n {
			k, err := unix.Read(rfd, buf)
			switch {
			case err == unix.EAGAIN || err == unix.EINTR:
				if bench.Now()-idleSince > int64(50*time.Microsecond) {
					if _, err := unix.EpollWait(ep, evs, 1000); err != nil && err != unix.EINTR {
						done <- err
						return
					}
					idleSince = bench.Now()
				}
				continue
			case err != nil:
				done <- err
				return
			case k == 0:
				done <- io.ErrUnexpectedEOF
				return
			}
			now := bench.Now()
			idleSince = now
			pending = append(pending, buf[:k]...)
			for len(pending) >= benchSize {
				lat = append(lat, time.Duration(now-int64(binary.LittleEndian.Uint64(pending))))
				pending = pending[benchSize:]
			}
		}
		done <- nil
	}()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0); err != nil {
		b.Fatal(err)
	}
	msg := make([]byte, benchSize)
	b.ResetTimer()
	start := bench.Now()
	for i := range n {
		next := start + int64(i)*10_000
		if wait := next - bench.Now(); wait > 0 {
			ts := unix.NsecToTimespec(wait)
			_ = unix.Nanosleep(&ts, nil)
		}
		binary.LittleEndian.PutUint64(msg, uint64(next))
		for {
			_, err := unix.Write(wfd, msg)
			if err == nil {
				break
			}
			if err != unix.EAGAIN && err != unix.EINTR {
				b.Fatal(err)
			}
		}
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	reportPercentiles(b, lat)
}

// rawFD returns c's socket descriptor in non-blocking mode. The net.Conn
// keeps it open until the benchmark's cleanup closes the pair.
func rawFD(b *testing.B, c net.Conn) int {
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		b.Fatal(err)
	}
	var fd int
	if err := rc.Control(func(f uintptr) { fd = int(f) }); err != nil {
		b.Fatal(err)
	}
	return fd
}
