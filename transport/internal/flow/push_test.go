package flow

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/sluicehq/sluice/lossdetect"
	"github.com/sluicehq/sluice/window"
	"github.com/sluicehq/sluice/wire"
)

// TestTryPushRunIsTryPushOneByOne pushes the same random messages into two
// Sources, one with TryPushRun (falling back to Push where it stops, as the
// transport does) and one with TryPush and Push message by message, and
// checks that both stop at the same message and write the same bytes.
func TestTryPushRunIsTryPushOneByOne(t *testing.T) {
	grew, refused := 0, 0 // runs stopped for a ring to grow, and pushes refused: both paths taken
	for seed := range 20 {
		rng := rand.New(rand.NewPCG(uint64(seed), 11))
		cfg := window.DefaultConfig()
		cfg.MaxMessages, cfg.MaxBytes = 1+rng.IntN(300), 64+rng.IntN(8192)
		maxPayload := cfg.MaxBytes - wire.MaxMessageHeadLen
		run, one := New(cfg, lossdetect.DefaultConfig(), 1, 0, nil), New(cfg, lossdetect.DefaultConfig(), 1, 0, nil)
		msgs := make([]wire.Message, 1+rng.IntN(400))
		ts := int64(rng.IntN(1000))
		for i := range msgs {
			ts += int64(rng.IntN(300)) - 20 // mostly one-byte deltas, some longer, some negative
			n := rng.IntN(150)
			if rng.IntN(50) == 0 {
				n = rng.IntN(cfg.MaxBytes + 20) // sometimes too large for the window
			}
			p := make([]byte, n)
			for j := range p {
				p[j] = byte(rng.Uint32())
			}
			msgs[i] = wire.Message{Ts: ts, Payload: p}
		}
		stopRun, stopOne := len(msgs), len(msgs)
		fallbacks := 0
		for i := 0; i < len(msgs); {
			k := run.TryPushRun(msgs[i:], maxPayload)
			i += k
			if i == len(msgs) {
				break
			}
			if len(msgs[i].Payload) > maxPayload {
				stopRun = i
				break
			}
			if _, err := run.Push(msgs[i].Ts, msgs[i].Payload); err != nil {
				stopRun = i
				break
			}
			fallbacks++
			i++
		}
		for i, m := range msgs {
			if len(m.Payload) > maxPayload {
				stopOne = i
				break
			}
			if _, ok := one.TryPush(m.Ts, m.Payload); ok {
				continue
			}
			if _, err := one.Push(m.Ts, m.Payload); err != nil {
				stopOne = i
				break
			}
		}
		if stopRun != stopOne {
			t.Fatalf("seed %d: TryPushRun stopped at message %d, one by one at %d", seed, stopRun, stopOne)
		}
		grew += fallbacks
		if stopRun < len(msgs) {
			refused++
		}
		a, b := run.Stats(), one.Stats()
		if a.Sent != b.Sent || a.Bytes != b.Bytes || a.Unacked != b.Unacked || a.UnackedBytes != b.UnackedBytes {
			t.Fatalf("seed %d: stats differ: run %+v, one by one %+v", seed, a, b)
		}
		run.Attach(0)
		one.Attach(0)
		got, _, _, _, _ := run.Fill(0, nil, 7, 1<<20, true)
		want, _, _, _, _ := one.Fill(0, nil, 7, 1<<20, true)
		if !bytes.Equal(got, want) {
			t.Fatalf("seed %d: the runs written differ (%d and %d bytes)", seed, len(got), len(want))
		}
	}
	if grew == 0 || refused == 0 {
		t.Fatalf("the messages never made a ring grow (%d) or were never refused (%d): the test checks too little", grew, refused)
	}
}

// BenchmarkTryPushRun pushes runs of 64 messages of 100 bytes, as loadgen's
// producers send them, into a default window (4096 messages, 1 MiB) that
// each run's ack empties again.
func BenchmarkTryPushRun(b *testing.B) {
	msgs := make([]wire.Message, 64)
	for i := range msgs {
		msgs[i] = wire.Message{Ts: int64(i), Payload: bytes.Repeat([]byte{byte(i)}, 100)}
	}
	src := New(window.DefaultConfig(), lossdetect.DefaultConfig(), 1, 0, nil)
	// Grow the rings to their full size so that the loop measures the
	// steady state.
	for ts := int64(0); ; ts++ {
		if _, err := src.Push(ts, msgs[0].Payload); err != nil {
			break
		}
	}
	src.win.MarkSent(src.win.NextSeq())
	src.win.Ack(src.win.NextSeq())
	b.SetBytes(int64(100 * len(msgs)))
	b.ReportAllocs()
	for b.Loop() {
		if n := src.TryPushRun(msgs, 1<<20); n != len(msgs) {
			b.Fatalf("pushed %d of %d", n, len(msgs))
		}
		src.win.MarkSent(src.win.NextSeq())
		src.win.Ack(src.win.NextSeq())
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(msgs)), "ns/msg")
}
