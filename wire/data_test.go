package wire

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"testing"
)

// randomBatch builds a DATA batch of several runs of several channels, with
// payloads of 0 to 300 bytes and timestamps that mostly rise but sometimes
// jump back.
func randomBatch(rng *rand.Rand, runs int) batch {
	var b batch
	seq := map[uint32]uint64{}
	ts := int64(1_700_000_000_000_000_000)
	for range runs {
		ch := uint32(rng.IntN(5))
		if rng.IntN(4) == 0 {
			ch = rng.Uint32()
		}
		r := run{H: RunHeader{Channel: ch, FirstSeq: seq[ch], BaseTs: ts}}
		n := 1 + rng.IntN(20)
		for range n {
			p := make([]byte, rng.IntN(300))
			for i := range p {
				p[i] = byte(rng.Uint32())
			}
			r.Msgs = append(r.Msgs, Message{Ts: ts, Payload: p})
			ts += int64(rng.IntN(2000)) - 200
		}
		r.H.BaseTs = r.Msgs[0].Ts
		seq[ch] += uint64(n)
		b.Runs = append(b.Runs, r)
	}
	return b
}

func TestDataBatchOfSeveralChannelsRoundTrips(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 50 {
		want := randomBatch(rng, 1+i%12)
		enc := appendValue(nil, want)
		f, n, err := DecodeFrame(enc, DefaultMaxFrame)
		if err != nil || n != len(enc) {
			t.Fatalf("batch %d: DecodeFrame = %d, %v", i, n, err)
		}
		got, err := readRuns(f.Body)
		if err != nil {
			t.Fatalf("batch %d: NextRun/NextMessage: %v", i, err)
		}
		if err := sameRuns(got, want.Runs); err != nil {
			t.Fatalf("batch %d: NextRun/NextMessage: %v", i, err)
		}
		whole, err := readRunsWhole(f.Body)
		if err != nil {
			t.Fatalf("batch %d: ReadRun: %v", i, err)
		}
		if err := sameRuns(whole, want.Runs); err != nil {
			t.Fatalf("batch %d: ReadRun: %v", i, err)
		}
	}
}

func TestNextRunSkipsTheUnreadMessagesOfTheCurrentRun(t *testing.T) {
	want := randomBatch(rand.New(rand.NewPCG(3, 4)), 8)
	body := appendValue(nil, want)[HeaderLen:]
	var r DataReader
	r.Reset(body)
	for i, wr := range want.Runs {
		h, err := r.NextRun()
		if err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		if h.Channel != wr.H.Channel || h.FirstSeq != wr.H.FirstSeq || h.Count != len(wr.Msgs) {
			t.Fatalf("run %d: header %+v, want channel %d first %d count %d", i, h, wr.H.Channel, wr.H.FirstSeq, len(wr.Msgs))
		}
		// Read none of the even runs' messages and only the first of the odd ones.
		if i%2 == 1 {
			m, err := r.NextMessage()
			if err != nil || m.Ts != wr.Msgs[0].Ts || string(m.Payload) != string(wr.Msgs[0].Payload) {
				t.Fatalf("run %d: first message %v, %v", i, m.Ts, err)
			}
		}
	}
	if _, err := r.NextRun(); err != io.EOF {
		t.Fatalf("after the last run: %v, want io.EOF", err)
	}
	if _, err := r.NextMessage(); err != io.EOF {
		t.Fatalf("NextMessage after the last run: %v, want io.EOF", err)
	}
}

func TestNextMessageBeforeAnyRunIsEOF(t *testing.T) {
	var r DataReader
	r.Reset(appendValue(nil, randomBatch(rand.New(rand.NewPCG(5, 6)), 1))[HeaderLen:])
	if _, err := r.NextMessage(); err != io.EOF {
		t.Fatalf("got %v, want io.EOF", err)
	}
}

func TestMessagesDoNotReachIntoTheNextMessage(t *testing.T) {
	body := appendValue(nil, batch{Runs: []run{{H: RunHeader{Channel: 1}, Msgs: []Message{
		{Payload: []byte("first")}, {Payload: []byte("second")},
	}}}})[HeaderLen:]
	var r DataReader
	r.Reset(body)
	msgs, _, err := r.ReadRun(nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = append(msgs[0].Payload, "XXXXXXXXX"...) // must not overwrite "second"
	if string(msgs[1].Payload) != "second" {
		t.Fatalf("appending to one payload changed the next: %q", msgs[1].Payload)
	}
}

func TestDecodingADataFrameDoesNotAllocate(t *testing.T) {
	frame := appendValue(nil, randomBatch(rand.New(rand.NewPCG(7, 8)), 16))
	var r DataReader
	buf := make([]Message, 0, 64)
	var total int
	allocs := testing.AllocsPerRun(100, func() {
		f, _, err := DecodeFrame(frame, DefaultMaxFrame)
		if err != nil {
			panic(err)
		}
		r.Reset(f.Body)
		for {
			msgs, _, err := r.ReadRun(buf)
			if err != nil {
				break
			}
			total += len(msgs)
		}
		r.Reset(f.Body)
		for {
			if _, err := r.NextRun(); err != nil {
				break
			}
			for {
				m, err := r.NextMessage()
				if err != nil {
					break
				}
				total += len(m.Payload)
			}
		}
	})
	if allocs != 0 {
		t.Fatalf("decoding a DATA frame allocated %v times per frame, want 0", allocs)
	}
	if total == 0 {
		t.Fatal("the decode loop saw no messages")
	}
}

func TestEncodingFramesDoesNotAllocateIntoABigEnoughBuffer(t *testing.T) {
	dst := make([]byte, 0, 1<<16)
	payload := make([]byte, 100)
	allocs := testing.AllocsPerRun(100, func() {
		b, start := BeginFrame(dst[:0], FrameData, 0)
		b = AppendRunHeader(b, RunHeader{Channel: 1, FirstSeq: 1, Count: 10, BaseTs: 5})
		for i := range 10 {
			b = AppendMessage(b, int64(4+i), int64(5+i), payload)
		}
		b = FinishFrame(b, start)
		b = AppendOpen(b, Open{Channel: 1, Epoch: 2})
		b = AppendAck(b, Ack{Channel: 1, Count: 10})
		b = AppendGoAway(b, GoAway{Message: "bye"})
		dst = b
	})
	if allocs != 0 {
		t.Fatalf("encoding allocated %v times, want 0", allocs)
	}
}

func ExampleDataReader() {
	// Build a DATA frame in place: two runs of two channels.
	payloads := [][]byte{[]byte("hello"), []byte("world")}
	buf, start := BeginFrame(nil, FrameData, 0)
	buf = AppendRunHeader(buf, RunHeader{Channel: 1, FirstSeq: 10, Count: 2, BaseTs: 1000})
	buf = AppendMessage(buf, 1000, 1000, payloads[0])
	buf = AppendMessage(buf, 1000, 1050, payloads[1])
	buf = AppendRunHeader(buf, RunHeader{Channel: 2, FirstSeq: 0, Count: 1, BaseTs: 999})
	buf = AppendMessage(buf, 999, 999, []byte("!"))
	buf = FinishFrame(buf, start)

	// Decode it the way a receive loop does.
	f, n, err := DecodeFrame(buf, DefaultMaxFrame)
	if errors.Is(err, ErrNeedMore) {
		return // wait for more bytes
	}
	fmt.Println(f.Type, n == len(buf), err)
	var r DataReader
	r.Reset(f.Body)
	for {
		h, err := r.NextRun()
		if err == io.EOF {
			break
		}
		if err != nil {
			fmt.Println(err) // a protocol fault: close the connection
			return
		}
		for i := range h.Count {
			m, err := r.NextMessage()
			if err != nil {
				fmt.Println(err)
				return
			}
			fmt.Printf("channel %d seq %d ts %d %s\n", h.Channel, h.FirstSeq+uint64(i), m.Ts, m.Payload)
		}
	}
	// Output:
	// DATA true <nil>
	// channel 1 seq 10 ts 1000 hello
	// channel 1 seq 11 ts 1050 world
	// channel 2 seq 0 ts 999 !
}

// A message kept encoded (head written once, payload after it) reads back
// as AppendMessage's, and a run may start at any such message with BaseTs
// set from its delta.
func TestEncodedMessagesStartARunAnywhere(t *testing.T) {
	ts := []int64{-5, 0, 1 << 40, 1<<40 + 7, math.MinInt64, math.MaxInt64, 3}
	var stored [][]byte
	prev := int64(0)
	for i, v := range ts {
		payload := bytes.Repeat([]byte{byte(i)}, i*50)
		m := AppendMessageHead(nil, prev, v, len(payload))
		if len(m) != MessageHeadLen(prev, v, len(payload)) || len(m) > MaxMessageHeadLen {
			t.Fatalf("message %d: head of %d bytes, MessageHeadLen %d", i, len(m), MessageHeadLen(prev, v, len(payload)))
		}
		m = append(m, payload...)
		if want := AppendMessage(nil, prev, v, payload); !bytes.Equal(m, want) {
			t.Fatalf("message %d: head+payload % x, AppendMessage % x", i, m, want)
		}
		stored = append(stored, m)
		prev = v
	}
	for first := range ts {
		d, ok := MessageDelta(stored[first])
		if !ok {
			t.Fatalf("message %d: no delta", first)
		}
		h := RunHeader{Channel: 1, FirstSeq: uint64(first), Count: len(ts) - first, BaseTs: ts[first] - d}
		body := AppendRunHeader(nil, h)
		for _, m := range stored[first:] {
			body = append(body, m...)
		}
		var r DataReader
		r.Reset(body)
		msgs, _, err := r.ReadRun(nil)
		if err != nil || len(msgs) != len(ts)-first {
			t.Fatalf("run from %d: %d messages, %v", first, len(msgs), err)
		}
		for i, m := range msgs {
			if m.Ts != ts[first+i] || len(m.Payload) != (first+i)*50 {
				t.Fatalf("run from %d, message %d: ts %d len %d, want %d %d", first, i, m.Ts, len(m.Payload), ts[first+i], (first+i)*50)
			}
		}
	}
	if _, ok := MessageDelta([]byte{0x80}); ok {
		t.Error("MessageDelta accepted a truncated varint")
	}
}
