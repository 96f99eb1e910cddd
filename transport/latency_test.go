package transport

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bench"
	"github.com/sluicehq/sluice/taskid"
)

// BenchmarkTransportPingPong measures the round trip of one 100-byte
// message there and back through two nodes, each way a channel of its own,
// the tasks on their own goroutines (Node.Handle): the pinging task's
// handler hands each pong to the benchmark's goroutine, which sends the
// next ping. Compare with BenchmarkPlainTCPPingPong from the same run.
func BenchmarkTransportPingPong(b *testing.B) { benchPingPong(b, pingHandOff) }

// BenchmarkTransportPingPongTask is BenchmarkTransportPingPong with the
// pinging task's handler sending the next ping itself, as the echo's sends
// each pong and as plain TCP's pinger reads and writes on one goroutine:
// no hand-off between goroutines of the benchmark's own (loadgen bench's
// ping-pong).
func BenchmarkTransportPingPongTask(b *testing.B) { benchPingPong(b, pingTask) }

// BenchmarkTransportPingPongInline is BenchmarkTransportPingPong with both
// tasks inline (Node.HandleInline): the echo is sent from the receiving
// loop, and, the connection being idle, written to the socket there.
func BenchmarkTransportPingPongInline(b *testing.B) { benchPingPong(b, pingInline) }

// BenchmarkTransportPingPongTaskInline is BenchmarkTransportPingPongTask
// with both tasks inline: every ping and pong is read, answered and
// written on the event loop, as plain TCP's pinger and echo each read and
// write on one goroutine.
func BenchmarkTransportPingPongTaskInline(b *testing.B) { benchPingPong(b, pingTaskInline) }

// BenchmarkTransportPingPongNetBackend is BenchmarkTransportPingPong on the
// net-package backend, whose connections park in Go's netpoller instead of
// blocking an event loop's thread in epoll_wait.
func BenchmarkTransportPingPongNetBackend(b *testing.B) {
	benchPingPong(b, pingHandOff, WithBackend(BackendNet))
}

// How a ping-pong benchmark's tasks run.
const (
	pingHandOff    = iota // Node.Handle; the pinger's handler hands each pong to the benchmark
	pingTask              // Node.Handle; the pinger's handler sends the next ping
	pingInline            // Node.HandleInline; the pinger's handler hands each pong to the benchmark
	pingTaskInline        // Node.HandleInline; the pinger's handler sends the next ping
)

// pingPair makes two listening nodes, a and z, with opts, and a channel
// each way: there from task (0) on a to task (1) on z, back the reverse.
func pingPair(t testing.TB, ctx context.Context, opts ...Option) (a, z *Node, there, back *Sender) {
	t.Helper()
	a, z = listeningNode(t, opts), listeningNode(t, opts)
	pz, _ := a.Peer(z.Addr())
	pa, _ := z.Peer(a.Addr())
	there, err := pz.OpenSender(ctx, taskid.ID{}, taskid.ID{Processor: 1})
	if err != nil {
		t.Fatal(err)
	}
	back, err = pa.OpenSender(ctx, taskid.ID{Processor: 1}, taskid.ID{})
	if err != nil {
		t.Fatal(err)
	}
	return a, z, there, back
}

func benchPingPong(b *testing.B, mode int, opts ...Option) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, z, there, back := pingPair(b, ctx, opts...)
	zh, ah := z.Handle, a.Handle
	if mode == pingInline || mode == pingTaskInline {
		zh, ah = z.HandleInline, a.HandleInline
	}
	_ = zh(taskid.ID{Processor: 1}, func(_ taskid.Channel, _ uint64, msgs []Message) {
		for _, m := range msgs {
			_ = back.Send(ctx, m.Ts, m.Payload)
		}
	})
	msg := make([]byte, benchSize)
	rtts := make([]time.Duration, 0, b.N)
	if mode == pingTask || mode == pingTaskInline {
		// The handler sends ping i+1 on pong i, b.N pings in all; only it
		// touches t0 and rtts until done is closed.
		done := make(chan struct{})
		var t0 time.Time
		_ = ah(taskid.ID{}, func(_ taskid.Channel, _ uint64, msgs []Message) {
			for range msgs {
				rtts = append(rtts, time.Since(t0))
				if len(rtts) == b.N {
					close(done)
					return
				}
				t0 = time.Now()
				if err := there.Send(ctx, 0, msg); err != nil {
					b.Error(err)
				}
			}
		})
		b.ResetTimer()
		t0 = time.Now()
		if err := there.Send(ctx, 0, msg); err != nil {
			b.Fatal(err)
		}
		select {
		case <-done:
		case <-ctx.Done():
			b.Fatalf("%d round trips of %d: %v", len(rtts), b.N, ctx.Err())
		}
		b.StopTimer()
		reportPercentiles(b, rtts)
		return
	}
	pong := make(chan struct{}, 1)
	_ = ah(taskid.ID{}, func(_ taskid.Channel, _ uint64, msgs []Message) {
		for range msgs {
			pong <- struct{}{}
		}
	})
	for b.Loop() {
		t0 := time.Now()
		if err := there.Send(ctx, 0, msg); err != nil {
			b.Fatal(err)
		}
		<-pong
		rtts = append(rtts, time.Since(t0))
	}
	reportPercentiles(b, rtts)
}

func reportPercentiles(b *testing.B, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	at := func(p float64) float64 { return float64(d[min(len(d)-1, int(p*float64(len(d))))].Microseconds()) }
	b.ReportMetric(at(0.5), "p50-µs")
	b.ReportMetric(at(0.99), "p99-µs")
	b.ReportMetric(at(0.999), "p99.9-µs")
}

// BenchmarkTransportFixedRate100k sends 100-byte messages at a fixed
// 100,000 msgs/s on one channel and reports the latency from each message's
// intended send time to its delivery (no coordinated omission). b.N is the
// number of messages. Compare with BenchmarkPlainTCPFixedRate100k from the
// same run: the same driver and clock over plain TCP.
func BenchmarkTransportFixedRate100k(b *testing.B) {
	benchFixedRate(b, 100_000, false, nil)
}

// BenchmarkTransportFixedRate100kInline is BenchmarkTransportFixedRate100k
// with the receiving task inline (Node.HandleInline): one hand-off fewer.
func BenchmarkTransportFixedRate100kInline(b *testing.B) {
	benchFixedRate(b, 100_000, true, nil)
}

// BenchmarkTransportFixedRate100kNetBackend is
// BenchmarkTransportFixedRate100kInline on the net-package backend.
func BenchmarkTransportFixedRate100kNetBackend(b *testing.B) {
	benchFixedRate(b, 100_000, true, []Option{WithBackend(BackendNet)})
}

func benchFixedRate(b *testing.B, rate float64, inline bool, opts []Option) {
	rx, _, p := newPair(b, opts, opts)
	lat := make([]time.Duration, 0, b.N)
	done := make(chan struct{})
	n := b.N
	h := func(_ taskid.Channel, _ uint64, msgs []Message) {
		now := bench.Now()
		for _, m := range msgs {
			lat = append(lat, time.Duration(now-m.Ts))
		}
		if len(lat) == n {
			close(done)
		}
	}
	handle := rx.Handle
	if inline {
		handle = rx.HandleInline
	}
	if err := handle(taskid.ID{Processor: 1}, h); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := p.OpenSender(ctx, taskid.ID{}, taskid.ID{Processor: 1})
	if err != nil {
		b.Fatal(err)
	}
	msg := make([]byte, benchSize)
	driveFixedRate(ctx, b, rate, func(ctx context.Context, _ int64, intended int64) error {
		return s.Send(ctx, intended, msg)
	})
	<-done
	reportPercentiles(b, lat)
}

// driveFixedRate resets the benchmark's timer and sends b.N messages
// through send at rate msgs/s, failing the benchmark if a send fails, and
// reports how far the driver ever fell behind its schedule. It sleeps as
// loadgen's drivers do, on a Go timer and then in the kernel for the last
// 2 ms, never spinning: a driver that spins through the end of each wait
// takes a whole core from the transport on a two-core machine, which shows
// as tails of several milliseconds here, and Go timers alone wake up to a
// millisecond late, which the latency would count too.
func driveFixedRate(ctx context.Context, b *testing.B, rate float64, send bench.Target) {
	b.ResetTimer()
	res, err := bench.FixedRate{Rate: rate, Count: int64(b.N), Clock: bench.RealClock{KernelBelow: bench.DefaultKernelBelow}}.Run(ctx, send)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(res.MaxLagNS)/1e3, "driver-max-lag-µs")
}
