package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/taskid"
)

var maxID = taskid.ID{Processor: math.MaxUint32, Index: math.MaxUint32}

// roundTripCases holds one or more values of every frame type, at zero,
// typical and maximum values. The fuzz targets are seeded from it too.
func roundTripCases() []struct {
	name string
	v    any
} {
	payload := func(n int, c byte) []byte { return bytes.Repeat([]byte{c}, n) }
	return []struct {
		name string
		v    any
	}{
		{"an OPEN of zero values", Open{}},
		{"an OPEN of a typical channel", Open{Channel: 3, Source: taskid.ID{Processor: 1, Index: 7}, Target: taskid.ID{Processor: 2, Index: 0}, Epoch: 4, FirstSeq: 1000}},
		{"an OPEN of maximum values", Open{Channel: math.MaxUint32, Source: maxID, Target: maxID, Epoch: math.MaxUint64, FirstSeq: math.MaxUint64}},
		{"a CLOSE of channel 0", Close{}},
		{"a CLOSE of the largest channel", Close{Channel: math.MaxUint32}},
		{"an ACKREQUEST of zero values", AckRequest{}},
		{"an ACKREQUEST of maximum values", AckRequest{Channel: math.MaxUint32, Epoch: math.MaxUint64, Seq: math.MaxUint64}},
		{"an ACK answering an ACKREQUEST", Ack{Channel: 9, Epoch: 2, ReqSeq: 500, Count: 100, Next: 501}},
		{"an ACK answering an OPEN", Ack{Channel: 1, Flags: AckOpen, Epoch: 1, ReqSeq: 0, Count: 0, Next: 0}},
		{"an ACK with reserved flags and maximum values", Ack{Channel: math.MaxUint32, Flags: 0xff, Epoch: math.MaxUint64, ReqSeq: math.MaxUint64, Count: math.MaxUint64, Next: math.MaxUint64}},
		{"a PING of 0", ping{0, 0}},
		{"a PING of the largest value", ping{math.MaxUint64, 0}},
		{"a PING asking for the clock", ping{7, PingClock}},
		{"a PONG", Pong{Value: 0x0123456789abcdef}},
		{"a PONG with the responder's clock", Pong{Value: 7, Clock: 1_764_000_000_000_000_000, HasClock: true}},
		{"a PONG with a clock before 1970", Pong{Value: 7, Clock: -1, HasClock: true}},
		{"an AUTH challenge of zeros", Auth{Step: AuthChallenge}},
		{"an AUTH proof of 0xff bytes", Auth{Step: AuthProof, Value: [AuthValueLen]byte(bytes.Repeat([]byte{0xff}, AuthValueLen))}},
		{"a GOAWAY with no message", GoAway{}},
		{"a GOAWAY with a message", GoAway{Code: GoAwayProtocolError, Message: "wire: checksum mismatch"}},
		{"a GOAWAY with an unknown code and a message of the maximum length", GoAway{Code: math.MaxUint32, Message: strings.Repeat("x", MaxGoAwayMessage)}},
		{"a DATA frame of one empty message", batch{Runs: []run{{H: RunHeader{Channel: 0, FirstSeq: 0, BaseTs: 0}, Msgs: []Message{{Ts: 0}}}}}},
		{"a DATA frame of one run of three messages", batch{Runs: []run{{H: RunHeader{Channel: 5, FirstSeq: 10, BaseTs: 1_700_000_000_000_000_000}, Msgs: []Message{
			{Ts: 1_700_000_000_000_000_000, Payload: []byte("a")},
			{Ts: 1_700_000_000_000_000_050, Payload: []byte("bc")},
			{Ts: 1_700_000_000_000_000_100, Payload: payload(200, 'd')},
		}}}}},
		{"a DATA frame whose timestamps go backwards and jump across the whole int64 range", batch{Runs: []run{{H: RunHeader{Channel: math.MaxUint32, FirstSeq: math.MaxUint64, BaseTs: math.MinInt64}, Msgs: []Message{
			{Ts: math.MinInt64, Payload: []byte("min")},
			{Ts: math.MaxInt64, Payload: []byte("max")},
			{Ts: -1, Payload: []byte("neg")},
			{Ts: math.MinInt64, Payload: nil},
			{Ts: 0, Payload: payload(128, 'z')},
		}}}}},
		{"a DATA frame whose base timestamp differs from its first message's", batch{Runs: []run{{H: RunHeader{Channel: 1, FirstSeq: 1, BaseTs: 1000}, Msgs: []Message{{Ts: 900, Payload: []byte("x")}, {Ts: 2000}}}}}},
		{"a compressed-flagged DATA frame of several runs of several channels", batch{Flags: DataCompressed, Runs: []run{
			{H: RunHeader{Channel: 1, FirstSeq: 100, BaseTs: 5}, Msgs: []Message{{Ts: 5, Payload: []byte("one")}, {Ts: 6, Payload: []byte("two")}}},
			{H: RunHeader{Channel: 2, FirstSeq: 7, BaseTs: 3}, Msgs: []Message{{Ts: 3, Payload: []byte("three")}}},
			{H: RunHeader{Channel: 1, FirstSeq: 102, BaseTs: 9}, Msgs: []Message{{Ts: 9, Payload: []byte("four")}, {Ts: 9}, {Ts: 10, Payload: payload(300, 'q')}}},
		}}},
	}
}

// longRun returns n messages whose heads are mostly two bytes and every
// seventh longer (a timestamp step of 1000, or a 200-byte payload).
func longRun(n int) []Message {
	msgs := make([]Message, n)
	ts := int64(0)
	for i := range msgs {
		ts++
		p := bytes.Repeat([]byte{'a' + byte(i%26)}, i%50)
		switch i % 7 {
		case 3:
			ts += 1000
		case 5:
			p = bytes.Repeat([]byte{'z'}, 200)
		}
		msgs[i] = Message{Ts: ts, Payload: p}
	}
	return msgs
}

// A run longer than ReadRun makes room for up front decodes to the messages
// encoded, whatever the capacity it is given.
func TestReadRunOfALongRun(t *testing.T) {
	want := []run{{H: RunHeader{Channel: 3, FirstSeq: 1}, Msgs: longRun(2*readRunPresize + 3)}}
	f, _, err := DecodeFrame(appendValue(nil, batch{Runs: want}), DefaultMaxFrame)
	if err != nil {
		t.Fatal(err)
	}
	for _, dst := range [][]Message{nil, make([]Message, 0, 10), make([]Message, 0, 3*readRunPresize)} {
		var r DataReader
		r.Reset(f.Body)
		msgs, h, err := r.ReadRun(dst)
		if err != nil {
			t.Fatalf("ReadRun with cap %d: %v", cap(dst), err)
		}
		if err := sameRuns([]run{{H: h, Msgs: msgs}}, want); err != nil {
			t.Fatalf("ReadRun with cap %d: %v", cap(dst), err)
		}
		if _, _, err := r.ReadRun(msgs); err != io.EOF {
			t.Fatalf("after the only run: %v, want io.EOF", err)
		}
	}
}

func TestEveryFrameTypeRoundTrips(t *testing.T) {
	for _, tc := range roundTripCases() {
		t.Run(tc.name, func(t *testing.T) {
			enc := appendValue([]byte("prefix"), tc.v)
			if string(enc[:6]) != "prefix" {
				t.Fatalf("the encoder overwrote the bytes already in dst")
			}
			enc = enc[6:]
			f, n, err := DecodeFrame(enc, DefaultMaxFrame)
			if err != nil {
				t.Fatalf("DecodeFrame: %v", err)
			}
			if n != len(enc) {
				t.Fatalf("DecodeFrame consumed %d bytes of a %d-byte frame", n, len(enc))
			}
			if cap(f.Body) != len(f.Body) {
				t.Errorf("the body's capacity %d exceeds its length %d: appending to it would overwrite the next frame", cap(f.Body), len(f.Body))
			}
			got, err := parseFrame(f)
			if err != nil {
				t.Fatalf("parsing the %v body: %v", f.Type, err)
			}
			if err := sameValue(got, tc.v); err != nil {
				t.Fatal(err)
			}
			if again := appendValue(nil, got); !bytes.Equal(again, enc) {
				t.Fatalf("re-encoding the decoded value gives\n%x\nwant\n%x", again, enc)
			}
			if b, ok := got.(batch); ok {
				whole, err := readRunsWhole(f.Body)
				if err != nil {
					t.Fatalf("ReadRun: %v", err)
				}
				if err := sameRuns(whole, b.Runs); err != nil {
					t.Fatalf("ReadRun disagrees with NextMessage: %v", err)
				}
			}
		})
	}
}

func TestRunHeaderLenAndMessageLenMatchWhatIsAppended(t *testing.T) {
	headers := []RunHeader{
		{Count: 1},
		{Channel: 127, FirstSeq: 127, Count: 127, BaseTs: -64},
		{Channel: 128, FirstSeq: 128, Count: 128, BaseTs: 64},
		{Channel: math.MaxUint32, FirstSeq: math.MaxUint64, Count: math.MaxInt, BaseTs: math.MinInt64},
		{Channel: 1, FirstSeq: 1, Count: 1, BaseTs: math.MaxInt64},
	}
	for _, h := range headers {
		if got, want := RunHeaderLen(h), len(AppendRunHeader(nil, h)); got != want || got > MaxRunHeaderLen {
			t.Errorf("RunHeaderLen(%+v) = %d, AppendRunHeader wrote %d (max %d)", h, got, want, MaxRunHeaderLen)
		}
	}
	ts := []int64{0, 1, -1, 63, 64, -64, -65, 1 << 40, math.MaxInt64, math.MinInt64}
	for _, prev := range ts {
		for _, cur := range ts {
			for _, n := range []int{0, 1, 127, 128, 16383, 16384} {
				p := make([]byte, n)
				if got, want := MessageLen(prev, cur, n), len(AppendMessage(nil, prev, cur, p)); got != want {
					t.Errorf("MessageLen(%d, %d, %d) = %d, AppendMessage wrote %d", prev, cur, n, got, want)
				}
			}
		}
	}
}

// ShortMessageHead gives the two-byte head exactly when the head is two
// bytes, and AppendMessageHead the varint encoding, both checked against
// encoding/binary (a zigzag varint delta, then the length as a uvarint).
func TestMessageHeadsMatchVarints(t *testing.T) {
	ts := []int64{0, 1, -1, 63, 64, -64, -65, 1 << 40, math.MaxInt64, math.MinInt64}
	for _, prev := range ts {
		for _, cur := range ts {
			for _, n := range []int{0, 1, 127, 128, 16383, 16384} {
				want := binary.AppendUvarint(binary.AppendVarint(nil, cur-prev), uint64(n))
				if got := AppendMessageHead(nil, prev, cur, n); !bytes.Equal(got, want) {
					t.Errorf("AppendMessageHead(%d, %d, %d) = %x, want %x", prev, cur, n, got, want)
				}
				d, l, ok := ShortMessageHead(prev, cur, n)
				if ok != (len(want) == 2) || ok && !bytes.Equal([]byte{d, l}, want) {
					t.Errorf("ShortMessageHead(%d, %d, %d) = %x %x, %v; the head is %x", prev, cur, n, d, l, ok, want)
				}
			}
		}
	}
}

func TestAppendGoAwayCutsLongMessagesAtACharacterBoundary(t *testing.T) {
	msg := strings.Repeat("é", MaxGoAwayMessage) // 2 bytes each
	msg = "x" + msg                              // so the limit falls inside a character
	f, _, err := DecodeFrame(AppendGoAway(nil, GoAway{Code: GoAwayLimit, Message: msg}), 0)
	if err != nil {
		t.Fatal(err)
	}
	g, err := ParseGoAway(f.Body)
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Message) != MaxGoAwayMessage-1 || !strings.HasPrefix(msg, g.Message) {
		t.Fatalf("message cut to %d bytes, want the %d-byte prefix that ends on a character boundary", len(g.Message), MaxGoAwayMessage-1)
	}
}

func TestPrefaceRoundTrips(t *testing.T) {
	for _, p := range []Preface{
		{Version: Version},
		{Version: Version, Flags: FlagCompression | FlagAuth, NodeID: math.MaxUint64},
		{Version: Version, Flags: 0xfc, NodeID: 42}, // reserved flags are passed through
	} {
		b := AppendPreface([]byte{0xaa}, p)[1:]
		if len(b) != PrefaceLen {
			t.Fatalf("AppendPreface wrote %d bytes, want %d", len(b), PrefaceLen)
		}
		got, n, err := DecodePreface(append(b, "trailing frame bytes"...))
		if err != nil || n != PrefaceLen || got != p {
			t.Fatalf("DecodePreface = %+v, %d, %v; want %+v, %d, nil", got, n, err, p, PrefaceLen)
		}
	}
	if got, _, _ := DecodePreface(AppendPreface(nil, Preface{NodeID: 7})); got.Version != Version {
		t.Errorf("a zero Version was written as %d, want %d", got.Version, Version)
	}
}

func TestEveryPrefixOfAValidPrefaceNeedsMore(t *testing.T) {
	b := AppendPreface(nil, Preface{Flags: FlagCompression, NodeID: 1 << 60})
	for k := range len(b) {
		if _, n, err := DecodePreface(b[:k]); err != ErrNeedMore || n != 0 {
			t.Fatalf("DecodePreface of the first %d bytes = %d, %v; want 0, ErrNeedMore", k, n, err)
		}
	}
}

func TestFrameTypeAndGoAwayCodeNames(t *testing.T) {
	want := map[FrameType]string{FrameOpen: "OPEN", FrameClose: "CLOSE", FrameData: "DATA", FrameAckRequest: "ACKREQUEST",
		FrameAck: "ACK", FramePing: "PING", FramePong: "PONG", FrameGoAway: "GOAWAY", FrameAuth: "AUTH", 0: "FrameType(0)", 10: "FrameType(10)"}
	for ft, s := range want {
		if ft.String() != s {
			t.Errorf("FrameType(%d).String() = %q, want %q", uint8(ft), ft.String(), s)
		}
	}
	codes := map[GoAwayCode]string{GoAwayNormal: "NORMAL", GoAwayProtocolError: "PROTOCOL_ERROR", GoAwayVersionMismatch: "VERSION_MISMATCH",
		GoAwayAuthFailed: "AUTH_FAILED", GoAwayShutdown: "SHUTDOWN", GoAwayLimit: "LIMIT", 6: "GoAwayCode(6)"}
	for c, s := range codes {
		if c.String() != s {
			t.Errorf("GoAwayCode(%d).String() = %q, want %q", uint32(c), c.String(), s)
		}
	}
}

func TestDecodeFrameStopsAtTheDeclaredLength(t *testing.T) {
	close7 := AppendClose(nil, Close{Channel: 7})
	t.Run("a frame followed by garbage decodes and leaves the garbage alone", func(t *testing.T) {
		in := append(append([]byte(nil), close7...), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
		f, n, err := DecodeFrame(in, 0)
		if err != nil || n != len(close7) {
			t.Fatalf("DecodeFrame = %d, %v; want %d, nil", n, err, len(close7))
		}
		if c, err := ParseClose(f.Body); err != nil || c.Channel != 7 {
			t.Fatalf("ParseClose = %+v, %v", c, err)
		}
		if _, _, err := DecodeFrame(in[n:], 0); !errors.Is(err, ErrUnknownFrame) {
			t.Fatalf("the garbage after the frame decoded with %v, want ErrUnknownFrame", err)
		}
	})
	t.Run("back-to-back frames of every type decode one at a time", func(t *testing.T) {
		var stream []byte
		cases := roundTripCases()
		for _, tc := range cases {
			stream = appendValue(stream, tc.v)
		}
		for i, tc := range cases {
			f, n, err := DecodeFrame(stream, DefaultMaxFrame)
			if err != nil {
				t.Fatalf("frame %d (%s): %v", i, tc.name, err)
			}
			got, err := parseFrame(f)
			if err != nil {
				t.Fatalf("frame %d (%s): %v", i, tc.name, err)
			}
			if err := sameValue(got, tc.v); err != nil {
				t.Fatalf("frame %d (%s): %v", i, tc.name, err)
			}
			stream = stream[n:]
		}
		if len(stream) != 0 {
			t.Fatalf("%d bytes left after the last frame", len(stream))
		}
	})
	t.Run("every proper prefix of every valid frame needs more and consumes nothing", func(t *testing.T) {
		for _, tc := range roundTripCases() {
			enc := appendValue(nil, tc.v)
			for k := range len(enc) {
				if _, n, err := DecodeFrame(enc[:k], DefaultMaxFrame); err != ErrNeedMore || n != 0 {
					t.Fatalf("%s: DecodeFrame of %d of %d bytes = %d, %v; want 0, ErrNeedMore", tc.name, k, len(enc), n, err)
				}
			}
		}
	})
}

func TestTheChecksumIsCRC32CBigEndian(t *testing.T) {
	// The check value of CRC-32C (Castagnoli) for "123456789" is 0xe3069283;
	// CRC-32 (IEEE) would give 0xcbf43926.
	f := AppendFrame(nil, FrameData, 0, []byte("123456789"))
	if got := f[6:10]; !bytes.Equal(got, []byte{0xe3, 0x06, 0x92, 0x83}) {
		t.Fatalf("the header's CRC field is %x, want e3069283", got)
	}
	if got := f[2:6]; !bytes.Equal(got, []byte{0, 0, 0, 9}) {
		t.Fatalf("the header's length field is %x, want 00000009", got)
	}
}

func TestAuthStepNames(t *testing.T) {
	for s, want := range map[AuthStep]string{AuthChallenge: "CHALLENGE", AuthProof: "PROOF", 0: "AuthStep(0)", 3: "AuthStep(3)"} {
		if s.String() != want {
			t.Errorf("AuthStep(%d).String() = %q, want %q", uint8(s), s.String(), want)
		}
	}
}
