package transport

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bench"
)

// The latency baselines: what plain TCP on this machine does with the same
// load, measured in the same run as the transport's latency benchmarks. Each
// message is a 100-byte frame whose first 8 bytes carry its intended send
// time; the writer writes each message with one write system call (the best
// latency plain TCP offers), and the reader reads frames with io.ReadFull.

// plainTCPPair returns two ends of a loopback TCP connection.
func plainTCPPair(b *testing.B) (client, server net.Conn) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			accepted <- nil
			return
		}
		accepted <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	server = <-accepted
	if server == nil {
		b.Fatal("accept failed")
	}
	b.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// BenchmarkPlainTCPPingPong is the baseline of BenchmarkTransportPingPong:
// a 100-byte message there and back over one loopback connection.
func BenchmarkPlainTCPPingPong(b *testing.B) {
	c, s := plainTCPPair(b)
	go func() {
		buf := make([]byte, benchSize)
		for {
			if _, err := io.ReadFull(s, buf); err != nil {
				return
			}
			if _, err := s.Write(buf); err != nil {
				return
			}
		}
	}()
	msg := make([]byte, benchSize)
	rtts := make([]time.Duration, 0, b.N)
	for b.Loop() {
		t0 := time.Now()
		if _, err := c.Write(msg); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, msg); err != nil {
			b.Fatal(err)
		}
		rtts = append(rtts, time.Since(t0))
	}
	reportPercentiles(b, rtts)
}

// BenchmarkPlainTCPFixedRate100k is the baseline of
// BenchmarkTransportFixedRate100k: the same driver and clock send 100-byte
// messages at 100,000 msgs/s, one write each, and the reader records the
// latency from each message's intended send time.
func BenchmarkPlainTCPFixedRate100k(b *testing.B) {
	c, s := plainTCPPair(b)
	n := b.N
	lat := make([]time.Duration, 0, n)
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, benchSize)
		for len(lat) < n {
			if _, err := io.ReadFull(s, buf); err != nil {
				return
			}
			lat = append(lat, time.Duration(bench.Now()-int64(binary.LittleEndian.Uint64(buf))))
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	msg := make([]byte, benchSize)
	b.ResetTimer()
	res, err := bench.FixedRate{Rate: 100_000, Count: int64(n), Clock: bench.RealClock{}}.Run(ctx, func(_ context.Context, _ int64, intended int64) error {
		binary.LittleEndian.PutUint64(msg, uint64(intended))
		_, err := c.Write(msg)
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	<-done
	if len(lat) != n {
		b.Fatalf("received %d of %d messages", len(lat), n)
	}
	reportPercentiles(b, lat)
	b.ReportMetric(float64(res.MaxLagNS)/1e3, "driver-max-lag-µs")
}

// BenchmarkFixedRate100kDriverAlone is the floor under both fixed-rate
// benchmarks: the same driver and clock at 100,000 msgs/s sending nothing,
// recording how late it hands each message over (Now() - intended). A
// latency figure cannot be better than this on the machine it ran on.
func BenchmarkFixedRate100kDriverAlone(b *testing.B) {
	lat := make([]time.Duration, 0, b.N)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b.ResetTimer()
	res, err := bench.FixedRate{Rate: 100_000, Count: int64(b.N), Clock: bench.RealClock{}}.Run(ctx, func(_ context.Context, _ int64, intended int64) error {
		lat = append(lat, time.Duration(bench.Now()-intended))
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	reportPercentiles(b, lat)
	b.ReportMetric(float64(res.MaxLagNS)/1e3, "driver-max-lag-µs")
}
