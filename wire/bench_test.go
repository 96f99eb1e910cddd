package wire

import (
	"testing"
)

// The benchmarks move 64 KiB DATA frames of 100-byte messages. Timestamps are
// nanoseconds 50 ns apart, what a single source producing 20 M messages/s
// stamps, so each delta is a 1-byte svarint (deltas up to 63 ns stay at one
// byte; 1 µs apart would cost one byte more per message). Payload length 100
// is a 1-byte varint. The overhead metric is the frame's bytes beyond the
// payloads, per message: header, run headers, delta and length.
const (
	benchPayload = 100
	benchFrame   = 64 << 10
	benchStepNs  = 50
)

type benchMsg struct {
	ch uint32
	ts int64
}

// benchBatch lays out messages of runs channels, in runs of equal length,
// that fill a 64 KiB frame.
func benchBatch(runs int) []benchMsg {
	per := MessageLen(0, benchStepNs, benchPayload)
	n := (benchFrame - HeaderLen - runs*MaxRunHeaderLen) / per
	msgs := make([]benchMsg, n)
	ts := int64(1_700_000_000_000_000_000)
	for i := range msgs {
		msgs[i] = benchMsg{ch: uint32(i * runs / n), ts: ts}
		ts += benchStepNs
	}
	return msgs
}

// encodeBatch writes msgs as one DATA frame, a run per consecutive channel.
func encodeBatch(dst []byte, msgs []benchMsg, payload []byte, seq uint64) []byte {
	dst, start := BeginFrame(dst, FrameData, 0)
	for i := 0; i < len(msgs); {
		j := i + 1
		for j < len(msgs) && msgs[j].ch == msgs[i].ch {
			j++
		}
		dst = AppendRunHeader(dst, RunHeader{Channel: msgs[i].ch, FirstSeq: seq, Count: j - i, BaseTs: msgs[i].ts})
		prev := msgs[i].ts
		for _, m := range msgs[i:j] {
			dst = AppendMessage(dst, prev, m.ts, payload)
			prev = m.ts
		}
		seq += uint64(j - i)
		i = j
	}
	return FinishFrame(dst, start)
}

func report(b *testing.B, frameLen, msgs, iters int) {
	b.SetBytes(int64(frameLen))
	b.ReportMetric(float64(msgs*iters)/b.Elapsed().Seconds(), "msgs/s")
	b.ReportMetric(float64(frameLen-msgs*benchPayload)/float64(msgs), "B/msg-overhead")
}

func benchmarkEncode(b *testing.B, runs int) {
	msgs := benchBatch(runs)
	payload := make([]byte, benchPayload)
	dst := make([]byte, 0, benchFrame)
	b.ReportAllocs()
	iters := 0
	var frame []byte
	for b.Loop() {
		frame = encodeBatch(dst[:0], msgs, payload, uint64(iters))
		iters++
	}
	if len(frame) > benchFrame {
		b.Fatalf("the frame is %d bytes, more than 64 KiB", len(frame))
	}
	report(b, len(frame), len(msgs), iters)
}

// benchmarkDecode decodes a 64 KiB DATA frame of runs runs, message by
// message with NextMessage, or (whole) a run at a time with ReadRun into a
// slice kept from frame to frame, as the transport does.
func benchmarkDecode(b *testing.B, runs int, whole bool) {
	msgs := benchBatch(runs)
	frame := encodeBatch(nil, msgs, make([]byte, benchPayload), 1)
	var r DataReader
	var buf []Message
	b.ReportAllocs()
	iters, seen := 0, 0
	for b.Loop() {
		f, _, err := DecodeFrame(frame, DefaultMaxFrame)
		if err != nil {
			b.Fatal(err)
		}
		r.Reset(f.Body)
		for whole {
			run, _, err := r.ReadRun(buf)
			if err != nil {
				break
			}
			for _, m := range run {
				seen += len(m.Payload)
			}
			buf = run
		}
		for !whole {
			if _, err := r.NextRun(); err != nil {
				break
			}
			for {
				m, err := r.NextMessage()
				if err != nil {
					break
				}
				seen += len(m.Payload)
			}
		}
		iters++
	}
	if seen != iters*len(msgs)*benchPayload {
		b.Fatalf("decoded %d payload bytes, want %d", seen, iters*len(msgs)*benchPayload)
	}
	report(b, len(frame), len(msgs), iters)
}

func BenchmarkEncodeData64KiB(b *testing.B)        { benchmarkEncode(b, 1) }
func BenchmarkEncodeData64KiB16Runs(b *testing.B)  { benchmarkEncode(b, 16) }
func BenchmarkDecodeData64KiB(b *testing.B)        { benchmarkDecode(b, 1, false) }
func BenchmarkDecodeData64KiB16Runs(b *testing.B)  { benchmarkDecode(b, 16, false) }
func BenchmarkReadRunData64KiB(b *testing.B)       { benchmarkDecode(b, 1, true) }
func BenchmarkReadRunData64KiB16Runs(b *testing.B) { benchmarkDecode(b, 16, true) }
