package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"
)

// frameOf builds a frame with a correct header and CRC around any body.
func frameOf(t FrameType, body ...byte) []byte { return AppendFrame(nil, t, 0, body) }

// cat joins byte slices.
func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func TestDecodePrefaceRejects(t *testing.T) {
	good := AppendPreface(nil, Preface{NodeID: 1})
	withByte := func(i int, v byte) []byte { b := bytes.Clone(good); b[i] = v; return b }
	cases := []struct {
		name string
		in   []byte
		want error
	}{
		{"a preface with the wrong magic", withByte(3, 'X'), ErrBadMagic},
		{"a single first byte that is not the magic's, without waiting for more", []byte("G"), ErrBadMagic},
		{"a TLS client hello", []byte{0x16, 0x03, 0x01, 0x02, 0x00}, ErrBadMagic},
		{"a preface of version 2", withByte(4, 2), ErrVersion},
		{"a preface of version 0", withByte(4, 0), ErrVersion},
		{"a version byte that is wrong, as soon as it arrives", []byte("SLCE\x07"), ErrVersion},
		{"a preface whose reserved bytes are not zero", withByte(7, 1), ErrReserved},
		{"a preface whose first reserved byte is not zero, as soon as it arrives", []byte("SLCE\x01\x00\x80"), ErrReserved},
		{"an empty input", nil, ErrNeedMore},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, n, err := DecodePreface(tc.in)
			if !errors.Is(err, tc.want) || sentinelOf(err) != tc.want || n != 0 {
				t.Fatalf("DecodePreface(%q) = %d, %v; want 0 and %v", tc.in, n, err, tc.want)
			}
		})
	}
	_, _, err := DecodePreface(withByte(4, 2))
	var ve *VersionError
	if !errors.As(err, &ve) || ve.Got != 2 || ve.Want != Version {
		t.Fatalf("a version-2 preface gave %#v, want a *VersionError{Got: 2, Want: %d}", err, Version)
	}
	if !strings.Contains(err.Error(), "version 2") {
		t.Errorf("the version error %q does not name the peer's version", err)
	}
}

func TestDecodeFrameRejects(t *testing.T) {
	header := func(t FrameType, length uint32) []byte {
		b := []byte{byte(t), 0}
		b = binary.BigEndian.AppendUint32(b, length)
		return binary.BigEndian.AppendUint32(b, 0)
	}
	corrupt := AppendPing(nil, 99, 0)
	corrupt[HeaderLen+3] ^= 0x10
	// A limit of 4 GiB - 1 or more waits for the body; an int cannot hold
	// one on 32-bit platforms, where the header is too large for any limit.
	hugeWant := ErrNeedMore
	if math.MaxInt < 1<<32-1 {
		hugeWant = ErrFrameTooLarge
	}
	cases := []struct {
		name    string
		in      []byte
		maxBody int
		want    error
	}{
		{"a frame of type 0", frameOf(0, 1), 0, ErrUnknownFrame},
		{"a frame of type 10, from a newer peer", frameOf(10), 0, ErrUnknownFrame},
		{"a frame of type 255", frameOf(255, 1, 2, 3), 0, ErrUnknownFrame},
		{"a header declaring 4 MiB + 1 under the default limit, before any body arrives", header(FrameData, DefaultMaxFrame+1), 0, ErrFrameTooLarge},
		{"a header declaring 4 GiB - 1", header(FrameOpen, 1<<32-1), math.MaxInt, hugeWant},
		{"a header declaring 4 GiB - 1 under the default limit", header(FrameOpen, 1<<32-1), 0, ErrFrameTooLarge},
		{"a 17-byte body under a limit of 16", AppendFrame(nil, FrameData, 0, make([]byte, 17)), 16, ErrFrameTooLarge},
		{"a body whose CRC does not match its header", corrupt, 0, ErrChecksum},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, n, err := DecodeFrame(tc.in, tc.maxBody)
			if sentinelOf(err) != tc.want || n != 0 {
				t.Fatalf("DecodeFrame = %d, %v; want 0 and %v", n, err, tc.want)
			}
			if tc.want != ErrNeedMore {
				var fe *FrameError
				if !errors.As(err, &fe) || fe.Offset != -1 {
					t.Fatalf("header fault %v is not a *FrameError at offset -1", err)
				}
			}
		})
	}
	t.Run("a body exactly at a limit of 16 is accepted", func(t *testing.T) {
		if _, _, err := DecodeFrame(AppendFrame(nil, FrameData, 0, make([]byte, 16)), 16); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("the too-large error tells a person what to do", func(t *testing.T) {
		_, err := DecodeHeader(header(FrameData, 9000000), DefaultMaxFrame)
		want := "wire: frame too large: DATA frame: body of 9000000 bytes exceeds the limit of 4194304 (raise it with the max-frame option)"
		if err == nil || err.Error() != want {
			t.Fatalf("got %q\nwant %q", err, want)
		}
	})
}

// A varint of n bytes, canonical, of value 1<<(7(n-1)).
func longVarint(n int) []byte {
	b := bytes.Repeat([]byte{0x80}, n-1)
	return append(b, 1)
}

func TestParseRejectsMalformedBodies(t *testing.T) {
	tooLong := bytes.Repeat([]byte{0xff}, 11)
	overflow64 := append(bytes.Repeat([]byte{0xff}, 9), 0x02)
	nonCanonical := []byte{0x80, 0x00}
	over32 := longVarint(5)
	over32[4] = 0x10 // 1<<32
	cases := []struct {
		name    string
		frame   FrameType
		body    []byte
		want    error
		wantOff int
	}{
		{"an empty CLOSE body", FrameClose, nil, ErrVarint, 0},
		{"a CLOSE whose channel varint is cut by the end of the body", FrameClose, []byte{0x80}, ErrVarint, 0},
		{"a CLOSE whose channel is 2^32", FrameClose, over32, ErrVarint, 0},
		{"a CLOSE whose channel is written as 0x80 0x00", FrameClose, nonCanonical, ErrVarint, 0},
		{"a CLOSE with a byte after the channel", FrameClose, []byte{1, 0}, ErrTrailing, 1},
		{"an empty OPEN body", FrameOpen, nil, ErrVarint, 0},
		{"an OPEN cut inside the target task id", FrameOpen, []byte{1, 2, 3, 4}, ErrVarint, 4},
		{"an OPEN whose source processor overflows 32 bits", FrameOpen, cat([]byte{1}, over32), ErrVarint, 1},
		{"an OPEN with trailing bytes", FrameOpen, []byte{1, 2, 3, 4, 5, 6, 7, 8}, ErrTrailing, 7},
		{"an ACKREQUEST whose epoch is 11 bytes long", FrameAckRequest, cat([]byte{1}, tooLong, []byte{0}), ErrVarint, 1},
		{"an ACKREQUEST whose sequence overflows 64 bits", FrameAckRequest, cat([]byte{1, 1}, overflow64), ErrVarint, 2},
		{"an ACKREQUEST with the largest sequence written in 10 bytes is fine but a byte after it is not", FrameAckRequest, cat([]byte{1, 1}, bytes.Repeat([]byte{0xff}, 9), []byte{1, 0}), ErrTrailing, 12},
		{"an ACK cut before its flags byte", FrameAck, []byte{1}, ErrOverrun, 1},
		{"an ACK cut before its next sequence", FrameAck, []byte{1, AckOpen, 1, 1, 1}, ErrVarint, 5},
		{"an ACK with trailing bytes", FrameAck, []byte{1, 0, 1, 1, 1, 1, 1}, ErrTrailing, 6},
		{"a PING of 7 bytes", FramePing, make([]byte, 7), ErrOverrun, 0},
		{"a PING of 9 bytes", FramePing, make([]byte, 9), ErrTrailing, 8},
		{"a PONG of 7 bytes", FramePong, make([]byte, 7), ErrOverrun, 0},
		{"a PONG without the clock flag but with a clock", FramePong, make([]byte, 16), ErrTrailing, 8},
		{"a GOAWAY whose message length runs past the body", FrameGoAway, []byte{1, 5, 'a', 'b'}, ErrOverrun, 1},
		{"a GOAWAY whose message is longer than 1024 bytes", FrameGoAway, cat([]byte{1, 0x81, 0x08}, make([]byte, 1025)), ErrOverrun, 1},
		{"a GOAWAY with bytes after its message", FrameGoAway, []byte{0, 1, 'a', 'b'}, ErrTrailing, 3},
		{"a GOAWAY whose code overflows 32 bits", FrameGoAway, cat(over32, []byte{0}), ErrVarint, 0},
		{"an empty AUTH body", FrameAuth, nil, ErrOverrun, 0},
		{"an AUTH whose value is one byte short", FrameAuth, cat([]byte{byte(AuthProof)}, make([]byte, AuthValueLen-1)), ErrOverrun, 1},
		{"an AUTH with a byte after its value", FrameAuth, cat([]byte{byte(AuthChallenge)}, make([]byte, AuthValueLen+1)), ErrTrailing, AuthBodyLen},
		{"an AUTH of step 0", FrameAuth, make([]byte, AuthBodyLen), ErrReserved, 0},
		{"an AUTH of step 3", FrameAuth, cat([]byte{3}, make([]byte, AuthValueLen)), ErrReserved, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// Through the whole decoder, as the transport sees it.
			f, n, err := DecodeFrame(frameOf(tc.frame, tc.body...), 0)
			if err != nil || n != HeaderLen+len(tc.body) {
				t.Fatalf("DecodeFrame: %d, %v", n, err)
			}
			_, err = parseFrame(f)
			if sentinelOf(err) != tc.want {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			var fe *FrameError
			if !errors.As(err, &fe) {
				t.Fatalf("%v is not a *FrameError", err)
			}
			if fe.Offset != tc.wantOff {
				t.Errorf("the error names body offset %d, want %d: %v", fe.Offset, tc.wantOff, err)
			}
			if ft := fe.Type; ft != tc.frame {
				t.Errorf("the error names frame type %v, want %v", ft, tc.frame)
			}
			if !strings.Contains(err.Error(), tc.frame.String()) || !strings.HasPrefix(err.Error(), "wire: ") {
				t.Errorf("the message %q does not start with wire: and name the frame type", err)
			}
		})
	}
}

func TestDataReaderRejects(t *testing.T) {
	// run header: channel 1, firstSeq 0, count, baseTs 0; then messages.
	runOf := func(count byte, msgs ...byte) []byte { return cat([]byte{1, 0, count, 0}, msgs) }
	okRun := runOf(1, 0, 1, 'a')
	cases := []struct {
		name    string
		body    []byte
		want    error
		wantOff int
	}{
		{"an empty body, which carries no run", nil, ErrVarint, 0},
		{"a run header cut inside its count", []byte{1, 0, 0x80}, ErrVarint, 2},
		{"a run header cut before its base timestamp", []byte{1, 0, 1}, ErrVarint, 3},
		{"a run channel of 2^32", cat([]byte{0x80, 0x80, 0x80, 0x80, 0x10}, []byte{0, 1, 0, 0, 0}), ErrVarint, 0},
		{"a run first sequence written with a trailing zero group", []byte{1, 0xff, 0x00, 1, 0, 0, 0}, ErrVarint, 1},
		{"a run base timestamp of 11 bytes", cat([]byte{1, 0, 1}, bytes.Repeat([]byte{0xff}, 11), []byte{0, 0}), ErrVarint, 3},
		{"a run whose count is 0", runOf(0, 0, 0), ErrOverrun, 2},
		{"a run whose count exceeds what the remaining bytes can hold", runOf(3, 0, 0, 0, 0, 0), ErrOverrun, 2},
		{"a run whose count is 2^63, rejected before any message is read", cat([]byte{1, 0}, bytes.Repeat([]byte{0xff}, 8), []byte{0x7f, 0}, make([]byte, 64)), ErrOverrun, 2},
		{"a message whose length runs past the body", runOf(1, 0, 50, 'a', 'b', 'c'), ErrOverrun, 5},
		{"a message whose length is 2^64-1", runOf(1, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01), ErrOverrun, 5},
		{"a message whose timestamp delta is cut by the end of the body", cat(runOf(1, 0x80, 0x80)), ErrVarint, 4},
		{"a message whose length varint is overlong", runOf(1, 0, 0x81, 0x00), ErrVarint, 5},
		{"a valid run followed by half a run header", cat(okRun, []byte{2, 0}), ErrVarint, len(okRun) + 2},
		{"a valid run followed by a run of count 0", cat(okRun, runOf(0, 0, 0)), ErrOverrun, len(okRun) + 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, read := range []struct {
				how string
				fn  func([]byte) ([]run, error)
			}{{"NextMessage", readRuns}, {"ReadRun", readRunsWhole}} {
				_, err := read.fn(tc.body)
				if sentinelOf(err) != tc.want {
					t.Fatalf("with %s: got %v, want %v", read.how, err, tc.want)
				}
				var fe *FrameError
				if !errors.As(err, &fe) || fe.Type != FrameData || fe.Offset != tc.wantOff {
					t.Fatalf("with %s: %v is not a *FrameError of a DATA frame at body offset %d", read.how, err, tc.wantOff)
				}
			}
			// And through a whole frame, skipping every message unread.
			f, _, err := DecodeFrame(frameOf(FrameData, tc.body...), 0)
			if err != nil {
				t.Fatal(err)
			}
			var r DataReader
			r.Reset(f.Body)
			for err == nil {
				_, err = r.NextRun()
			}
			if sentinelOf(err) != tc.want {
				t.Fatalf("skipping with NextRun: got %v, want %v", err, tc.want)
			}
		})
	}
}

func TestDataReaderCountBoundary(t *testing.T) {
	// Each message is at least 2 bytes: a count equal to half the remaining
	// bytes can be valid, one more cannot.
	body := cat([]byte{0, 0, 3, 0}, []byte{0, 0, 0, 0, 0, 0})
	runs, err := readRuns(body)
	if err != nil || len(runs) != 1 || len(runs[0].Msgs) != 3 {
		t.Fatalf("three empty messages in six bytes: %v, %v", runs, err)
	}
	body[2] = 4
	if _, err := readRuns(body); !errors.Is(err, ErrOverrun) {
		t.Fatalf("four messages in six bytes: %v, want ErrOverrun", err)
	}
}

func TestDataReaderFaultsAreSticky(t *testing.T) {
	var r DataReader
	r.Reset([]byte{1, 0, 0, 0}) // count 0
	_, err1 := r.NextRun()
	_, err2 := r.NextRun()
	_, err3 := r.NextMessage()
	_, _, err4 := r.ReadRun(nil)
	if !errors.Is(err1, ErrOverrun) || err2 != err1 || err3 != err1 || err4 != err1 {
		t.Fatalf("after a fault: %v / %v / %v / %v; want the same ErrOverrun each time", err1, err2, err3, err4)
	}
	r.Reset([]byte{1, 0, 1, 0, 0, 1, 'x'})
	if _, err := r.NextRun(); err != nil {
		t.Fatalf("Reset did not clear the fault: %v", err)
	}
}

// A PONG's length follows its flags: 16 bytes with PongClock, 8 without;
// anything else is refused, and reserved flag bits change nothing.
func TestParsePongChecksTheLengthItsFlagsSay(t *testing.T) {
	for _, tc := range []struct {
		name    string
		flags   uint8
		body    []byte
		want    error
		wantOff int
	}{
		{"a clock PONG of 8 bytes", PongClock, make([]byte, 8), ErrOverrun, 8},
		{"a clock PONG of 15 bytes", PongClock, make([]byte, 15), ErrOverrun, 8},
		{"a clock PONG of 17 bytes", PongClock, make([]byte, 17), ErrTrailing, 16},
		{"a clock PONG with a reserved bit of 16 bytes", PongClock | 0x80, make([]byte, 16), nil, 0},
		{"a plain PONG with a reserved bit of 8 bytes", 0x80, make([]byte, 8), nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, _, err := DecodeFrame(AppendFrame(nil, FramePong, tc.flags, tc.body), 0)
			if err != nil {
				t.Fatal(err)
			}
			p, err := ParsePong(f.Flags, f.Body)
			if sentinelOf(err) != tc.want {
				t.Fatalf("got %+v, %v, want %v", p, err, tc.want)
			}
			var fe *FrameError
			if err != nil && (!errors.As(err, &fe) || fe.Offset != tc.wantOff || fe.Type != FramePong) {
				t.Errorf("%v: want a *FrameError of PONG at body offset %d", err, tc.wantOff)
			}
			if err == nil && p.HasClock != (tc.flags&PongClock != 0) {
				t.Errorf("HasClock %v with flags %#x", p.HasClock, tc.flags)
			}
		})
	}
}
