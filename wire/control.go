package wire

import (
	"encoding/binary"
	"strconv"
	"unicode/utf8"

	"github.com/sluicehq/sluice/taskid"
)

// Open is the body of an OPEN frame: the sender will send data of the channel
// (Source, Target, Epoch) under the connection-local number Channel, starting
// at sequence FirstSeq. The receiver binds the number in its channel table and
// answers with an [Ack] carrying [AckOpen].
type Open struct {
	Channel  uint32
	Source   taskid.ID
	Target   taskid.ID
	Epoch    uint64
	FirstSeq uint64
}

// Close is the body of a CLOSE frame: the channel number is no longer used
// and may be reused by a later OPEN.
type Close struct {
	Channel uint32
}

// AckRequest is the body of an ACKREQUEST frame: the receiver should answer,
// once its task has consumed up to Seq, with an [Ack] that counts what it
// received on Channel since the previous ACKREQUEST.
type AckRequest struct {
	Channel uint32
	Epoch   uint64
	Seq     uint64
}

// AckOpen is the [Ack] flag meaning the ack answers an OPEN, not an
// ACKREQUEST. Other Ack flag bits are reserved: senders set them to zero,
// receivers ignore them (ParseAck passes them through in Ack.Flags).
const AckOpen uint8 = 1 << 0

// Ack is the body of an ACK frame. ReqSeq echoes the ACKREQUEST's Seq (or the
// OPEN's FirstSeq), Count is the number of messages received since the
// previous ACKREQUEST, and Next is the next sequence the receiver expects.
type Ack struct {
	Channel uint32
	Flags   uint8
	Epoch   uint64
	ReqSeq  uint64
	Count   uint64
	Next    uint64
}

// GoAwayCode says why a connection is being closed.
type GoAwayCode uint32

// GOAWAY codes. Receivers treat a code they do not know like
// GoAwayProtocolError for logging and otherwise ignore it.
const (
	GoAwayNormal          GoAwayCode = 0 // orderly close, nothing wrong
	GoAwayProtocolError   GoAwayCode = 1 // the peer sent a malformed or unexpected frame
	GoAwayVersionMismatch GoAwayCode = 2 // the peer speaks another protocol version
	GoAwayAuthFailed      GoAwayCode = 3 // authentication failed
	GoAwayShutdown        GoAwayCode = 4 // the node is shutting down
	GoAwayLimit           GoAwayCode = 5 // a configured limit was exceeded (channels, frame size, ...)
)

var goAwayNames = [...]string{
	GoAwayNormal:          "NORMAL",
	GoAwayProtocolError:   "PROTOCOL_ERROR",
	GoAwayVersionMismatch: "VERSION_MISMATCH",
	GoAwayAuthFailed:      "AUTH_FAILED",
	GoAwayShutdown:        "SHUTDOWN",
	GoAwayLimit:           "LIMIT",
}

// String returns the code's name, "PROTOCOL_ERROR" for example, or
// "GoAwayCode(9)" for a code this version does not know.
func (c GoAwayCode) String() string {
	if uint64(c) < uint64(len(goAwayNames)) {
		return goAwayNames[c]
	}
	return "GoAwayCode(" + strconv.FormatUint(uint64(c), 10) + ")"
}

// MaxGoAwayMessage is the longest GOAWAY message in bytes.
const MaxGoAwayMessage = 1024

// GoAway is the body of a GOAWAY frame.
type GoAway struct {
	Code    GoAwayCode
	Message string // for a person reading logs; at most MaxGoAwayMessage bytes
}

// AppendOpen appends a whole OPEN frame to dst and returns the extended slice.
func AppendOpen(dst []byte, f Open) []byte {
	dst, start := BeginFrame(dst, FrameOpen, 0)
	dst = appendUvarint(dst, uint64(f.Channel))
	dst = taskid.Append(dst, f.Source)
	dst = taskid.Append(dst, f.Target)
	dst = appendUvarint(dst, f.Epoch)
	dst = appendUvarint(dst, f.FirstSeq)
	return FinishFrame(dst, start)
}

// AppendClose appends a whole CLOSE frame to dst and returns the extended slice.
func AppendClose(dst []byte, f Close) []byte {
	dst, start := BeginFrame(dst, FrameClose, 0)
	dst = appendUvarint(dst, uint64(f.Channel))
	return FinishFrame(dst, start)
}

// AppendAckRequest appends a whole ACKREQUEST frame to dst and returns the
// extended slice.
func AppendAckRequest(dst []byte, f AckRequest) []byte {
	dst, start := BeginFrame(dst, FrameAckRequest, 0)
	dst = appendUvarint(dst, uint64(f.Channel))
	dst = appendUvarint(dst, f.Epoch)
	dst = appendUvarint(dst, f.Seq)
	return FinishFrame(dst, start)
}

// AppendAck appends a whole ACK frame to dst and returns the extended slice.
func AppendAck(dst []byte, f Ack) []byte {
	dst, start := BeginFrame(dst, FrameAck, 0)
	dst = appendUvarint(dst, uint64(f.Channel))
	dst = append(dst, f.Flags)
	dst = appendUvarint(dst, f.Epoch)
	dst = appendUvarint(dst, f.ReqSeq)
	dst = appendUvarint(dst, f.Count)
	dst = appendUvarint(dst, f.Next)
	return FinishFrame(dst, start)
}

// Flags of PING and PONG frames.
const (
	// PingClock asks the receiver of a PING to answer with a PONG that
	// carries its clock ([PongClock]). A receiver that predates it ignores
	// the bit, as it does any reserved flag, and answers a plain PONG.
	PingClock uint8 = 1 << 0
	// PongClock marks a PONG whose body carries, after the echoed value,
	// the responder's clock.
	PongClock uint8 = 1 << 0
)

// Pong is the body of a PONG frame: the Value of the PING it answers and,
// when HasClock (flag [PongClock]), the responder's Clock when it answered,
// in nanoseconds since the Unix epoch. A node that pinged at T1 and reads
// the PONG at T4 (its own clock) knows that the responder's clock read
// Clock at some instant between: the responder's clock is ahead of its own
// by Clock - (T1+T4)/2, to within (T4-T1)/2.
type Pong struct {
	Value    uint64
	Clock    int64
	HasClock bool
}

// AppendPing appends a whole PING frame carrying v, with flags (0 or
// [PingClock]), to dst and returns the extended slice.
func AppendPing(dst []byte, v uint64, flags uint8) []byte {
	dst, start := BeginFrame(dst, FramePing, flags)
	return FinishFrame(binary.BigEndian.AppendUint64(dst, v), start)
}

// AppendPong appends a whole PONG frame for p to dst and returns the
// extended slice: 8 bytes of body, or 16 with flag [PongClock] when
// p.HasClock.
func AppendPong(dst []byte, p Pong) []byte {
	var flags uint8
	if p.HasClock {
		flags = PongClock
	}
	dst, start := BeginFrame(dst, FramePong, flags)
	dst = binary.BigEndian.AppendUint64(dst, p.Value)
	if p.HasClock {
		dst = binary.BigEndian.AppendUint64(dst, uint64(p.Clock))
	}
	return FinishFrame(dst, start)
}

// AppendGoAway appends a whole GOAWAY frame to dst and returns the extended
// slice. A message longer than MaxGoAwayMessage bytes is cut at the last
// UTF-8 character boundary that fits.
func AppendGoAway(dst []byte, f GoAway) []byte {
	msg := f.Message
	if len(msg) > MaxGoAwayMessage {
		cut := MaxGoAwayMessage
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		msg = msg[:cut]
	}
	dst, start := BeginFrame(dst, FrameGoAway, 0)
	dst = appendUvarint(dst, uint64(f.Code))
	dst = appendUvarint(dst, uint64(len(msg)))
	dst = append(dst, msg...)
	return FinishFrame(dst, start)
}

// parser walks a control frame body field by field and keeps the first
// fault, so the Parse functions read as a list of fields.
type parser struct {
	t   FrameType
	b   []byte
	off int
	err error
}

func (p *parser) u64(field string) uint64 {
	if p.err != nil {
		return 0
	}
	v, next := uvarint(p.b, p.off)
	if next < 0 {
		p.err = varintErr(p.t, p.off, next, field)
		return 0
	}
	p.off = next
	return v
}

func (p *parser) u32(field string) uint32 {
	if p.err != nil {
		return 0
	}
	v, next := uvarint32(p.b, p.off)
	if next < 0 {
		p.err = varintErr(p.t, p.off, next, field)
		return 0
	}
	p.off = next
	return v
}

func (p *parser) byte(field string) uint8 {
	if p.err != nil {
		return 0
	}
	if p.off >= len(p.b) {
		p.err = frameErr(p.t, p.off, ErrOverrun, "%s: the body ends before this 1-byte field", field)
		return 0
	}
	p.off++
	return p.b[p.off-1]
}

func (p *parser) taskID(procField, indexField string) taskid.ID {
	return taskid.ID{Processor: p.u32(procField), Index: p.u32(indexField)}
}

// done reports the first fault, or ErrTrailing if bytes are left over.
func (p *parser) done() error {
	if p.err == nil && p.off != len(p.b) {
		p.err = frameErr(p.t, p.off, ErrTrailing, "%d bytes left over after the last field", len(p.b)-p.off)
	}
	return p.err
}

// ParseOpen parses the body of an OPEN frame. The result does not alias body.
func ParseOpen(body []byte) (Open, error) {
	p := parser{t: FrameOpen, b: body}
	f := Open{
		Channel:  p.u32("channel"),
		Source:   p.taskID("source processor", "source index"),
		Target:   p.taskID("target processor", "target index"),
		Epoch:    p.u64("epoch"),
		FirstSeq: p.u64("first sequence"),
	}
	if err := p.done(); err != nil {
		return Open{}, err
	}
	return f, nil
}

// ParseClose parses the body of a CLOSE frame.
func ParseClose(body []byte) (Close, error) {
	p := parser{t: FrameClose, b: body}
	f := Close{Channel: p.u32("channel")}
	if err := p.done(); err != nil {
		return Close{}, err
	}
	return f, nil
}

// ParseAckRequest parses the body of an ACKREQUEST frame.
func ParseAckRequest(body []byte) (AckRequest, error) {
	p := parser{t: FrameAckRequest, b: body}
	f := AckRequest{Channel: p.u32("channel"), Epoch: p.u64("epoch"), Seq: p.u64("sequence")}
	if err := p.done(); err != nil {
		return AckRequest{}, err
	}
	return f, nil
}

// ParseAck parses the body of an ACK frame. Reserved flag bits are kept in
// Ack.Flags; test AckOpen with a mask.
func ParseAck(body []byte) (Ack, error) {
	p := parser{t: FrameAck, b: body}
	f := Ack{
		Channel: p.u32("channel"),
		Flags:   p.byte("flags"),
		Epoch:   p.u64("epoch"),
		ReqSeq:  p.u64("requested sequence"),
		Count:   p.u64("count"),
		Next:    p.u64("next sequence"),
	}
	if err := p.done(); err != nil {
		return Ack{}, err
	}
	return f, nil
}

// ParsePing parses the body of a PING frame: exactly 8 bytes, an opaque
// big-endian value. A shorter body is [ErrOverrun], a longer one
// [ErrTrailing].
func ParsePing(body []byte) (uint64, error) {
	if len(body) < 8 {
		return 0, frameErr(FramePing, 0, ErrOverrun, "the body has %d bytes, the value needs 8", len(body))
	}
	if len(body) > 8 {
		return 0, frameErr(FramePing, 8, ErrTrailing, "%d bytes left over after the 8-byte value", len(body)-8)
	}
	return binary.BigEndian.Uint64(body), nil
}

// ParsePong parses the body of a PONG frame with flags: the echoed value
// and, with [PongClock], the responder's clock; exactly 8 or 16 bytes. A
// shorter body is [ErrOverrun], a longer one [ErrTrailing].
func ParsePong(flags uint8, body []byte) (Pong, error) {
	want := 8
	if flags&PongClock != 0 {
		want = 16
	}
	if len(body) < want {
		return Pong{}, frameErr(FramePong, len(body)&^7, ErrOverrun, "the body has %d bytes, flags %#x need %d", len(body), flags, want)
	}
	if len(body) > want {
		return Pong{}, frameErr(FramePong, want, ErrTrailing, "%d bytes left over after the %d-byte body", len(body)-want, want)
	}
	p := Pong{Value: binary.BigEndian.Uint64(body)}
	if want == 16 {
		p.Clock, p.HasClock = int64(binary.BigEndian.Uint64(body[8:])), true
	}
	return p, nil
}

// ParseGoAway parses the body of a GOAWAY frame. The message is copied into
// a new string. A message length over MaxGoAwayMessage is [ErrOverrun], even
// if the body holds that many bytes.
func ParseGoAway(body []byte) (GoAway, error) {
	p := parser{t: FrameGoAway, b: body}
	code := p.u32("code")
	lenOff := p.off
	n := p.u64("message length")
	if p.err != nil {
		return GoAway{}, p.err
	}
	if n > MaxGoAwayMessage {
		return GoAway{}, frameErr(FrameGoAway, lenOff, ErrOverrun, "message length %d exceeds the limit of %d", n, MaxGoAwayMessage)
	}
	if n > uint64(len(body)-p.off) {
		return GoAway{}, frameErr(FrameGoAway, lenOff, ErrOverrun, "message length %d, but only %d bytes remain in the body", n, len(body)-p.off)
	}
	msg := string(body[p.off : p.off+int(n)])
	p.off += int(n)
	if err := p.done(); err != nil {
		return GoAway{}, err
	}
	return GoAway{Code: GoAwayCode(code), Message: msg}, nil
}
