package wire

import (
	"math"
	"strconv"

	"github.com/sluicehq/sluice/internal/crcframe"
)

// FrameType is the first byte of a frame header.
type FrameType uint8

// Frame types. Zero is never a valid type, so a run of zero bytes is
// rejected at once.
const (
	FrameOpen       FrameType = 1 // opens a channel: number, source, target, epoch, first sequence
	FrameClose      FrameType = 2 // closes a channel number
	FrameData       FrameType = 3 // runs of messages
	FrameAckRequest FrameType = 4 // asks the receiver to count what it got up to a sequence
	FrameAck        FrameType = 5 // answers an ACKREQUEST or an OPEN
	FramePing       FrameType = 6 // liveness probe carrying an opaque value
	FramePong       FrameType = 7 // echoes a PING's value
	FrameGoAway     FrameType = 8 // the sender is closing the connection, and why
	FrameAuth       FrameType = 9 // one step of the authentication exchange; only between two FlagAuth prefaces
)

const maxFrameType = FrameAuth

var frameNames = [...]string{
	FrameOpen:       "OPEN",
	FrameClose:      "CLOSE",
	FrameData:       "DATA",
	FrameAckRequest: "ACKREQUEST",
	FrameAck:        "ACK",
	FramePing:       "PING",
	FramePong:       "PONG",
	FrameGoAway:     "GOAWAY",
	FrameAuth:       "AUTH",
}

// String returns the type's name as SPEC.md spells it, "DATA" for example,
// or "FrameType(10)" for a type this version does not know.
func (t FrameType) String() string {
	if t >= 1 && t <= maxFrameType {
		return frameNames[t]
	}
	return "FrameType(" + strconv.Itoa(int(t)) + ")"
}

// Known reports whether this version of the protocol defines t.
func (t FrameType) Known() bool { return t >= 1 && t <= maxFrameType }

// DataCompressed is the DATA frame flag meaning the body is s2-compressed
// (github.com/klauspost/compress/s2 block format). This package does not
// decompress: the transport does, and then walks the decompressed body with
// a [DataReader]. Frame flags other than this one are reserved: senders set
// them to zero and receivers ignore them.
const DataCompressed uint8 = 1 << 0

// HeaderLen is the length of a frame header: type, flags, body length
// (u32 big-endian), CRC-32C of the body (u32 big-endian).
const HeaderLen = 10

// DefaultMaxFrame is the default limit on a frame's body length, 4 MiB.
const DefaultMaxFrame = 4 << 20

// frameLayout is where a frame header keeps the body length and its CRC,
// which covers the body alone.
var frameLayout = crcframe.Layout{HeaderLen: HeaderLen, LenAt: 2, CRCAt: 6,
	CoverFrom: HeaderLen, CoverTo: HeaderLen, BigEndian: true}

// Header is a decoded frame header.
type Header struct {
	Type   FrameType
	Flags  uint8
	Length uint32 // body length in bytes, not counting the header
	CRC    uint32 // CRC-32C (Castagnoli) of the body
}

// DecodeHeader decodes the frame header at the start of b. It returns
// [ErrNeedMore] if fewer than HeaderLen bytes are present. It checks the type
// and the length against maxBody (DefaultMaxFrame if maxBody <= 0) from the
// header alone, so a hostile length is rejected before anyone waits for, or
// buffers, its body. It does not verify the CRC; [DecodeFrame] does.
func DecodeHeader(b []byte, maxBody int) (Header, error) {
	if len(b) < HeaderLen {
		return Header{}, ErrNeedMore
	}
	h := Header{
		Type:   FrameType(b[0]),
		Flags:  b[1],
		Length: uint32(frameLayout.BodyLen(b)),
		CRC:    frameLayout.Stored(b),
	}
	if !h.Type.Known() {
		return Header{}, frameErr(h.Type, -1, ErrUnknownFrame,
			"type byte 0x%02x is not defined by protocol version %d (the peer is newer, or the stream is corrupt)", b[0], Version)
	}
	if maxBody <= 0 {
		maxBody = DefaultMaxFrame
	}
	if uint64(h.Length) > uint64(maxBody) {
		return Header{}, frameErr(h.Type, -1, ErrFrameTooLarge,
			"body of %d bytes exceeds the limit of %d (raise it with the max-frame option)", h.Length, maxBody)
	}
	return h, nil
}

// Frame is a decoded frame. Body aliases the buffer passed to [DecodeFrame]
// (its capacity is clipped to its length, so appending to it never writes
// into the bytes after it); it is valid as long as that buffer is, which for
// a gnet Peek result means until the next Discard. Keep a copy to retain it.
type Frame struct {
	Type  FrameType
	Flags uint8
	Body  []byte
}

// DecodeFrame decodes the frame at the start of b and returns it with the
// number of bytes it occupies, HeaderLen plus its body length. It returns
// [ErrNeedMore] and n == 0 while the frame is incomplete, the header errors of
// [DecodeHeader] as soon as the header is present, and an error matching
// [ErrChecksum] if the body does not match the header's CRC. It never reads
// b beyond n. It does not parse the body; use the Parse functions or a
// [DataReader] for that.
func DecodeFrame(b []byte, maxBody int) (Frame, int, error) {
	h, err := DecodeHeader(b, maxBody)
	if err != nil {
		return Frame{}, 0, err
	}
	end := HeaderLen + int(h.Length)
	if len(b) < end {
		return Frame{}, 0, ErrNeedMore
	}
	body := b[HeaderLen:end:end]
	if sum, ok := frameLayout.Check(b, body); !ok {
		return Frame{}, 0, frameErr(h.Type, -1, ErrChecksum,
			"the %d-byte body has CRC-32C 0x%08x, the header says 0x%08x (corrupted in transit, or a broken sender)", len(body), sum, h.CRC)
	}
	return Frame{Type: h.Type, Flags: h.Flags, Body: body}, end, nil
}

// BeginFrame starts a frame of type t at the end of dst: it appends a
// HeaderLen-byte header whose length and CRC are left for [FinishFrame], and
// returns the extended slice with the header's offset. Append the body to
// out, then call FinishFrame(out, start). Nothing else may be appended to
// the buffer between the two calls, and the body must stay within
// the receiver's limit (DefaultMaxFrame unless agreed otherwise).
func BeginFrame(dst []byte, t FrameType, flags uint8) (out []byte, start int) {
	start = len(dst)
	return append(dst, byte(t), flags, 0, 0, 0, 0, 0, 0, 0, 0), start
}

// FinishFrame completes the frame that [BeginFrame] started at dst[start:]:
// it writes the length and CRC of dst[start+HeaderLen:] into the header and
// returns dst. It panics if start does not leave room for a header, or if
// the body is 4 GiB or more, which is a bug in the caller, never bad input.
func FinishFrame(dst []byte, start int) []byte {
	if start < 0 || len(dst)-start < HeaderLen {
		panic("wire: FinishFrame without a BeginFrame header at start")
	}
	body := dst[start+HeaderLen:]
	if uint64(len(body)) > math.MaxUint32 {
		panic("wire: frame body of 4 GiB or more")
	}
	frameLayout.Seal(dst[start:start+HeaderLen], body)
	return dst
}

// AppendFrame appends a whole frame with the given type, flags and an
// already-encoded body, for example a compressed DATA body. body may not
// overlap dst's spare capacity.
func AppendFrame(dst []byte, t FrameType, flags uint8, body []byte) []byte {
	dst, start := BeginFrame(dst, t, flags)
	dst = append(dst, body...)
	return FinishFrame(dst, start)
}
