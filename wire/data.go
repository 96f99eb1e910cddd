package wire

import (
	"io"
)

// RunHeader introduces a run of Count messages of one channel inside a DATA
// body. The messages have sequence numbers FirstSeq, FirstSeq+1, ...; the
// first message's timestamp is BaseTs plus its delta, and each following
// timestamp is the previous one plus its delta.
type RunHeader struct {
	Channel  uint32
	FirstSeq uint64
	Count    int
	BaseTs   int64
}

// Message is one decoded message. Payload aliases the DATA body given to
// [DataReader.Reset], with its capacity clipped to its length; it is valid as
// long as that body is. Copy it to keep it.
type Message struct {
	Ts      int64
	Payload []byte
}

// MaxRunHeaderLen is the largest number of bytes [AppendRunHeader] writes.
const MaxRunHeaderLen = 5 + 10 + 10 + 10

// AppendRunHeader appends the header of a run to dst, which should be inside
// a DATA frame started with [BeginFrame], and returns the extended slice.
// Exactly h.Count messages must follow, written with [AppendMessage], the
// first with prevTs = h.BaseTs: BaseTs may be the first message's
// timestamp (its delta is then 0, one byte), or, for messages encoded ahead
// of time against the message before them, that message's timestamp
// ([MessageDelta]). It panics if
// h.Count < 1: a run of no messages is malformed and a peer would close the
// connection over it.
func AppendRunHeader(dst []byte, h RunHeader) []byte {
	if h.Count < 1 {
		panic("wire: AppendRunHeader with a count below 1")
	}
	dst = appendUvarint(dst, uint64(h.Channel))
	dst = appendUvarint(dst, h.FirstSeq)
	dst = appendUvarint(dst, uint64(h.Count))
	return appendSvarint(dst, h.BaseTs)
}

// RunHeaderLen is the number of bytes [AppendRunHeader] writes for h.
func RunHeaderLen(h RunHeader) int {
	return uvarintLen(uint64(h.Channel)) + uvarintLen(h.FirstSeq) + uvarintLen(uint64(h.Count)) + uvarintLen(zigzag(h.BaseTs))
}

// AppendMessage appends one message of a run to dst and returns the extended
// slice: the timestamp as a delta from prevTs (the previous message's
// timestamp, or the run's BaseTs for the first message), the payload length
// and the payload. Deltas wrap around like int64 arithmetic, so any pair of
// timestamps is representable; close timestamps cost one byte.
func AppendMessage(dst []byte, prevTs, ts int64, payload []byte) []byte {
	return append(AppendMessageHead(dst, prevTs, ts, len(payload)), payload...)
}

// MessageLen is the number of bytes [AppendMessage] writes for a message of
// payloadLen bytes with timestamp ts after prevTs. A batcher uses it to decide
// whether a message still fits before appending it.
func MessageLen(prevTs, ts int64, payloadLen int) int {
	return MessageHeadLen(prevTs, ts, payloadLen) + payloadLen
}

// MaxMessageHeadLen is the most bytes a message's head (its timestamp delta
// and payload length, what [AppendMessage] writes before the payload) takes
// for a payload shorter than 4 GiB.
const MaxMessageHeadLen = 10 + 5

// AppendMessageHead appends what [AppendMessage] writes before the payload:
// the timestamp delta from prevTs and the payload length. A sender that
// keeps messages encoded (head and payload together, ready to be copied
// into a run as they are) writes the head once, when the message is made.
func AppendMessageHead(dst []byte, prevTs, ts int64, payloadLen int) []byte {
	if d, n, ok := ShortMessageHead(prevTs, ts, payloadLen); ok {
		return append(dst, d, n) // the common head of a small message
	}
	dst = appendSvarint(dst, ts-prevTs)
	return appendUvarint(dst, uint64(payloadLen))
}

// ShortMessageHead returns the two bytes of the head [AppendMessageHead]
// writes when it is two bytes (a timestamp delta from -64 to 63 and a
// payload length under 128, the common case), and false when it is longer.
// It inlines, so a caller that pushes message after message pays no call
// for the common head. The bytes are returned apart, not as a [2]byte: a
// caller that stored such an array byte by byte and read it back whole
// stalled on every message (the load cannot be forwarded from two stores),
// a twelfth of a sender's time at full speed.
func ShortMessageHead(prevTs, ts int64, payloadLen int) (delta, length byte, ok bool) {
	if z := zigzag(ts - prevTs); z < 0x80 && uint(payloadLen) < 0x80 {
		return byte(z), byte(payloadLen), true
	}
	return 0, 0, false
}

// MessageHeadLen is the number of bytes [AppendMessageHead] writes.
func MessageHeadLen(prevTs, ts int64, payloadLen int) int {
	return uvarintLen(zigzag(ts-prevTs)) + uvarintLen(uint64(payloadLen))
}

// MessageDelta returns the timestamp delta at the start of an encoded
// message (what [AppendMessage] or [AppendMessageHead] wrote), and false if b
// does not start with a well-formed one. A sender that re-sends encoded
// messages from the middle of a stream sets the run's BaseTs to the first
// message's timestamp minus its delta.
func MessageDelta(b []byte) (int64, bool) {
	d, next := svarint(b, 0)
	return d, next > 0
}

// DataReader walks the runs and messages of one DATA body in place, without
// copying and without allocating (except for the error value when the body
// is malformed). Use it as
//
//	r.Reset(frame.Body)
//	for {
//		h, err := r.NextRun()
//		if err == io.EOF { break }
//		if err != nil { return err } // protocol fault
//		for {
//			m, err := r.NextMessage()
//			if err == io.EOF { break }
//			if err != nil { return err }
//			...
//		}
//	}
//
// or with [DataReader.ReadRun] for a run at a time. The body must be
// decompressed already if the frame had [DataCompressed]. After a fault every
// call returns the same error. The zero value is ready after Reset; a
// DataReader is not safe for concurrent use.
type DataReader struct {
	body   []byte
	off    int   // next unread byte
	left   int   // messages of the current run not read yet
	prevTs int64 // timestamp of the previous message of the run, or BaseTs
	runs   int   // runs started
	err    error // sticky fault
}

// Reset makes r read body from its start. r keeps body (and the messages it
// returns alias it) until the next Reset.
func (r *DataReader) Reset(body []byte) {
	*r = DataReader{body: body}
}

func (r *DataReader) fail(err error) error {
	r.err = err
	r.left = 0
	return err
}

// NextRun returns the header of the next run, skipping (and validating) any
// messages of the current run that were not read. It returns io.EOF after the
// last run. A body with no run at all is malformed. A run count of zero, or
// one that the rest of the body cannot possibly hold (every message takes at
// least two bytes), is [ErrOverrun], reported before any message is read.
func (r *DataReader) NextRun() (RunHeader, error) {
	for r.left > 0 {
		if _, err := r.NextMessage(); err != nil {
			return RunHeader{}, err
		}
	}
	if r.err != nil {
		return RunHeader{}, r.err
	}
	b, off := r.body, r.off
	if off >= len(b) {
		if r.runs == 0 {
			return RunHeader{}, r.fail(frameErr(FrameData, off, ErrVarint, "channel: the body ends before its first run"))
		}
		return RunHeader{}, io.EOF
	}
	ch, next := uvarint32(b, off)
	if next < 0 {
		return RunHeader{}, r.fail(varintErr(FrameData, off, next, "run channel"))
	}
	off = next
	seq, next := uvarint(b, off)
	if next < 0 {
		return RunHeader{}, r.fail(varintErr(FrameData, off, next, "run first sequence"))
	}
	countOff := next
	count, next := uvarint(b, countOff)
	if next < 0 {
		return RunHeader{}, r.fail(varintErr(FrameData, countOff, next, "run count"))
	}
	off = next
	base, next := svarint(b, off)
	if next < 0 {
		return RunHeader{}, r.fail(varintErr(FrameData, off, next, "run base timestamp"))
	}
	if count == 0 {
		return RunHeader{}, r.fail(frameErr(FrameData, countOff, ErrOverrun, "a run of channel %d has a count of 0", ch))
	}
	if room := uint64(len(b)-next) / 2; count > room {
		return RunHeader{}, r.fail(frameErr(FrameData, countOff, ErrOverrun,
			"a run of channel %d claims %d messages, but the %d bytes left hold at most %d", ch, count, len(b)-next, room))
	}
	r.off = next
	r.left = int(count)
	r.prevTs = base
	r.runs++
	return RunHeader{Channel: ch, FirstSeq: seq, Count: int(count), BaseTs: base}, nil
}

// NextMessage returns the next message of the current run, or io.EOF when the
// run has no more (including before the first NextRun).
func (r *DataReader) NextMessage() (Message, error) {
	if r.left == 0 {
		if r.err != nil {
			return Message{}, r.err
		}
		return Message{}, io.EOF
	}
	b := r.body
	var (
		delta int64
		n     uint64
		off   = r.off + 1 // where the length starts, on the fast path
		start = r.off + 2 // where the payload starts, on the fast path
	)
	// Fast path: a one-byte delta and a one-byte length, the common case
	// for small messages close in time.
	if start <= len(b) && b[r.off] < 0x80 && b[off] < 0x80 {
		z := uint64(b[r.off])
		delta = unzigzag(z)
		n = uint64(b[off])
	} else {
		delta, off = svarint(b, r.off)
		if off < 0 {
			return Message{}, r.fail(varintErr(FrameData, r.off, off, "message timestamp delta"))
		}
		n, start = uvarint(b, off)
		if start < 0 {
			return Message{}, r.fail(varintErr(FrameData, off, start, "message length"))
		}
	}
	if n > uint64(len(b)-start) {
		return Message{}, r.fail(frameErr(FrameData, off, ErrOverrun,
			"a message claims %d bytes, but only %d remain in the body", n, len(b)-start))
	}
	end := start + int(n)
	ts := r.prevTs + delta
	r.prevTs = ts
	r.off = end
	r.left--
	return Message{Ts: ts, Payload: b[start:end:end]}, nil
}

// readRunPresize is the most messages ReadRun makes room for before it
// decodes them.
const readRunPresize = 4096

// ReadRun decodes the next whole run, appending its messages to dst[:0], and
// returns them with the run's header. It allocates only if cap(dst) is less
// than the run's count. It returns io.EOF after the last run. On a fault it
// returns dst[:0] and the error.
func (r *DataReader) ReadRun(dst []Message) ([]Message, RunHeader, error) {
	dst = dst[:0]
	h, err := r.NextRun()
	if err != nil {
		return dst, RunHeader{}, err
	}
	b := r.body
	// Room for the run, so that the loop below makes no call: as far as the
	// body can hold it (a message takes two bytes at least), and up to
	// readRunPresize, beyond which the run grows dst only as it decodes (a
	// count the body does not bear out costs no large allocation).
	if n := min(r.left, (len(b)-r.off)/2, readRunPresize); cap(dst) < n {
		dst = make([]Message, 0, n)
	}
	for r.left > 0 {
		// NextMessage's fast path, inline and on locals: a one-byte delta
		// and length.
		off, left, ts := r.off, r.left, r.prevTs
		for left > 0 && len(dst) < cap(dst) && off+2 <= len(b) && b[off] < 0x80 && b[off+1] < 0x80 {
			z, start := uint64(b[off]), off+2
			end := start + int(b[off+1])
			if end > len(b) {
				break
			}
			ts += unzigzag(z)
			dst = dst[:len(dst)+1]
			dst[len(dst)-1] = Message{Ts: ts, Payload: b[start:end:end]}
			off, left = end, left-1
		}
		r.off, r.left, r.prevTs = off, left, ts
		if left == 0 {
			break
		}
		m, err := r.NextMessage()
		if err != nil {
			return dst[:0], RunHeader{}, err
		}
		dst = append(dst, m)
	}
	return dst, h, nil
}
