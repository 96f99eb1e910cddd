package transport

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bench"
	"github.com/sluicehq/sluice/taskid"
)

// The benchmarks here move 100-byte messages over loopback. Compare them
// with BenchmarkPlainTCPIdealBatching from the same run: plain TCP writing
// ideal 64 KiB batches of length-prefixed messages is the ceiling.

const benchSize = 100

// BenchmarkPlainTCPIdealBatching is the baseline: a writer fills 64 KiB
// buffers with 4-byte length prefixed messages and writes them; a reader
// parses and checks every message (bench.PackedWriter, bench.ReadPacked,
// which loadgen bench runs too).
func BenchmarkPlainTCPIdealBatching(b *testing.B) {
	c, s := plainTCPPair(b)
	type read struct {
		d   bench.Delivery
		err error
	}
	got := make(chan read, 1)
	go func() {
		d, err := bench.ReadPacked(s, benchSize)
		got <- read{d, err}
	}()
	w, err := bench.NewPackedWriter(c, benchSize)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(benchSize)
	b.ReportAllocs()
	start := time.Now()
	for b.Loop() {
		if err := w.Add(0); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	c.CloseWrite()
	r := <-got
	if r.err != nil {
		b.Fatal(r.err)
	}
	if !r.d.ExactlyOnce(int64(b.N)) {
		b.Fatalf("received %+v of %d", r.d, b.N)
	}
	b.ReportMetric(float64(r.d.Delivered)/time.Since(start).Seconds(), "msgs/s")
}

// benchPair starts a receiving and a sending node, counts what the receiver
// delivers, and opens channels senders from (0, i) to (1, i). The receiving
// tasks count on the connection's loop (HandleAllInline), as the plain-TCP
// baseline's reader parses on its own; the *Goroutine benchmarks hand every
// run to the target's goroutine instead (HandleAll), as an engine whose
// tasks may block does. The nodes are closed when the benchmark ends.
func benchPair(b *testing.B, channels int, rxOpts, txOpts []Option) (tx, rx *Node, p *Peer, senders []*Sender, delivered *atomic.Int64) {
	return benchPairDelivery(b, channels, true, rxOpts, txOpts)
}

func benchPairDelivery(b *testing.B, channels int, inline bool, rxOpts, txOpts []Option) (tx, rx *Node, p *Peer, senders []*Sender, delivered *atomic.Int64) {
	b.Helper()
	rx, tx, p = newPair(b, rxOpts, txOpts)
	delivered = new(atomic.Int64)
	count := func(taskid.ID) Handler {
		return func(_ taskid.Channel, _ uint64, msgs []Message) { delivered.Add(int64(len(msgs))) }
	}
	if inline {
		rx.HandleAllInline(count)
	} else {
		rx.HandleAll(count)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := p.WaitConnected(ctx); err != nil {
		b.Fatal(err)
	}
	senders = make([]*Sender, channels)
	for i := range senders {
		var err error
		if senders[i], err = p.OpenSender(ctx, taskid.ID{Index: uint32(i)}, taskid.ID{Processor: 1, Index: uint32(i)}); err != nil {
			b.Fatal(err)
		}
	}
	return tx, rx, p, senders, delivered
}

func benchTransport(b *testing.B, channels int, rxOpts, txOpts []Option) {
	benchTransportDelivery(b, channels, true, rxOpts, txOpts)
}

func benchTransportDelivery(b *testing.B, channels int, inline bool, rxOpts, txOpts []Option) {
	tx, rx, _, senders, delivered := benchPairDelivery(b, channels, inline, rxOpts, txOpts)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	msg := make([]byte, benchSize)
	b.SetBytes(benchSize)
	b.ReportAllocs()
	start := time.Now()
	next := 0 // the channel visited next
	for b.Loop() {
		// Visit channels in turn, skipping those without credit, as an
		// engine with many outputs would. (No i%channels: a division a
		// message was the harness's own cost, a few ns of each op.)
		for {
			s := senders[next]
			next++
			last := next == channels
			if last {
				next = 0
			}
			err := s.TrySend(0, msg)
			if err == nil {
				break
			}
			if last { // a whole round without credit: wait on this one
				if err := s.Send(ctx, 0, msg); err != nil {
					b.Fatal(err)
				}
				break
			}
		}
	}
	for _, s := range senders {
		if err := s.Flush(ctx); err != nil {
			b.Fatal(err)
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	if got := delivered.Load(); got != int64(b.N) {
		b.Fatalf("delivered %d of %d", got, b.N)
	}
	txt := tx.Stats().Totals()
	wire := txt.WireOut + rx.Stats().Totals().WireOut
	b.ReportMetric(float64(b.N)/float64(max(txt.Batches, 1)), "msgs/batch")
	if testing.Verbose() {
		b.Logf("flushes by cause: %v", txt.Flushes)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
	b.ReportMetric(float64(wire)/float64(b.N), "wireB/msg")
}

func BenchmarkTransport1Channel(b *testing.B) { benchTransport(b, 1, nil, nil) }

// BenchmarkTransport1ChannelGoroutine delivers to the target task's own
// goroutine (Node.HandleAll), the path of a task that may block.
func BenchmarkTransport1ChannelGoroutine(b *testing.B) { benchTransportDelivery(b, 1, false, nil, nil) }

// BenchmarkTransport1ChannelNetBackend is BenchmarkTransport1Channel on the
// net-package backend: its ratio to it is the cost of goroutines and
// synchronous writes instead of gnet's event loops.
func BenchmarkTransport1ChannelNetBackend(b *testing.B) {
	be := []Option{WithBackend(BackendNet)}
	benchTransport(b, 1, be, be)
}

// BenchmarkTransport1ChannelTLS is BenchmarkTransport1Channel over TLS 1.3
// (the net backend, AES-GCM on this machine's CPU, with authentication by a
// pre-shared key as well): its ratio to the NetBackend figure is what
// encryption costs, to BenchmarkTransport1Channel what TLS costs in all.
func BenchmarkTransport1ChannelTLS(b *testing.B) {
	be := []Option{WithTLS(testTLS(b)), WithKey(testKey)}
	benchTransport(b, 1, be, be)
}

func BenchmarkTransport100Channels(b *testing.B) { benchTransport(b, 100, nil, nil) }

func BenchmarkTransport10000Channels(b *testing.B) { benchTransport(b, 10000, nil, nil) }

func BenchmarkTransport10000ChannelsGoroutine(b *testing.B) {
	benchTransportDelivery(b, 10000, false, nil, nil)
}

// BenchmarkTransportLooseWindow makes flow control all but absent: a window
// of a million messages, requests rarely. Its ratio to
// BenchmarkTransport1Channel is the cost of flow control.
func BenchmarkTransportLooseWindow(b *testing.B) {
	benchTransport(b, 1, []Option{WithInboundBudget(128 << 20)}, []Option{WithWindow(1<<20, 60<<20), WithPeerBudget(128 << 20)})
}

// BenchmarkTransportDataLoss5 drops 5% of DATA frames; go-back-N re-sends.
func BenchmarkTransportDataLoss5(b *testing.B) {
	benchTransport(b, 1, nil, []Option{WithFaults(Faults{Drop: 0.05, Seed: 1})})
}

func BenchmarkTransportWindowSweep(b *testing.B) {
	for _, w := range []struct{ msgs, bytes int }{{1024, 256 << 10}, {2048, 512 << 10}, {4096, 1 << 20}, {8192, 2 << 20}, {16384, 4 << 20}} {
		b.Run(fmt.Sprintf("%d-%dKiB", w.msgs, w.bytes>>10), func(b *testing.B) {
			benchTransport(b, 1, nil, []Option{WithWindow(w.msgs, w.bytes)})
		})
	}
}

// BenchmarkTransport10000ChannelsRuns16 visits 10,000 channels in turn and
// gives each a run of 16 messages per visit, as an engine task emitting runs
// to many outputs would, through Sender.TrySendRun.
func BenchmarkTransport10000ChannelsRuns16(b *testing.B) { benchTransportRuns(b, 10000, 16) }

// BenchmarkTransport1ChannelRuns64 sends runs of 64 messages with SendRun.
func BenchmarkTransport1ChannelRuns64(b *testing.B) { benchTransportRuns(b, 1, 64) }

func benchTransportRuns(b *testing.B, channels, run int) {
	tx, rx, p, senders, delivered := benchPair(b, channels, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	msgs := make([]Message, run)
	for i := range msgs {
		msgs[i].Payload = make([]byte, benchSize)
	}
	b.SetBytes(benchSize)
	b.ReportAllocs()
	start := time.Now()
	total := int64(b.N)
	var sent int64
	for i := 0; sent < total; i++ {
		k := int(min(int64(run), total-sent))
		mark := p.CreditMark()
		n, err := senders[i%channels].TrySendRun(msgs[:k])
		sent += int64(n)
		if err != nil && !errors.Is(err, ErrNoCredit) {
			b.Fatal(err)
		}
		if n == 0 && i%channels == channels-1 {
			_ = p.WaitCredit(ctx, mark) // a full round without credit
		}
	}
	for _, s := range senders {
		if err := s.Flush(ctx); err != nil {
			b.Fatal(err)
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	if got := delivered.Load(); got != total {
		b.Fatalf("delivered %d of %d", got, total)
	}
	wire := tx.Stats().Totals().WireOut + rx.Stats().Totals().WireOut
	b.ReportMetric(float64(total)/elapsed.Seconds(), "msgs/s")
	b.ReportMetric(float64(wire)/float64(total), "wireB/msg")
}
