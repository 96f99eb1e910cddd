package wire

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/sluicehq/sluice/taskid"
)

// ErrNeedMore means the bytes given are an incomplete prefix of a valid
// preface or frame. It is not a protocol fault: call again with more bytes.
// Nothing was consumed. Decoders return this exact value, unwrapped, so a
// plain == comparison works as well as [errors.Is].
var ErrNeedMore = errors.New("wire: need more bytes")

// Protocol faults. Each closes the connection that produced it; the transport
// maps them onto a GOAWAY code. Decoders wrap them with detail (usually in a
// [*FrameError]), so test them with [errors.Is].
var (
	// ErrBadMagic means the peer's first bytes are not "SLCE": it is not a
	// Sluice node, or it speaks something else (TLS, HTTP) on this port.
	ErrBadMagic = errors.New("wire: bad magic (the peer is not speaking the Sluice protocol)")
	// ErrVersion means the peer speaks another protocol version. The
	// concrete error is a [*VersionError] carrying both versions.
	ErrVersion = errors.New("wire: unsupported protocol version")
	// ErrReserved means a field that this version reserves is not zero.
	ErrReserved = errors.New("wire: reserved field is not zero")
	// ErrUnknownFrame means a frame header names a type this version does
	// not know.
	ErrUnknownFrame = errors.New("wire: unknown frame type")
	// ErrFrameTooLarge means a frame header declares a body longer than the
	// receiver's limit. It is reported from the header alone, before the
	// body is awaited.
	ErrFrameTooLarge = errors.New("wire: frame too large")
	// ErrVarint means a varint is truncated by the end of its (complete)
	// body, is longer than 10 bytes or than its canonical form, or does not
	// fit the field it encodes (a channel number over 32 bits, say).
	ErrVarint = errors.New("wire: malformed varint")
	// ErrChecksum means a frame body does not match the CRC-32C in its
	// header: the bytes were corrupted in transit or the sender is broken.
	ErrChecksum = errors.New("wire: checksum mismatch")
	// ErrOverrun means a count or a length runs past the end of its frame,
	// a fixed-width field is cut short by the end of the body, a run has a
	// count of zero, or a GOAWAY message is longer than MaxGoAwayMessage.
	ErrOverrun = errors.New("wire: count or length overruns the frame")
	// ErrTrailing means a control frame has bytes left over after its last
	// field.
	ErrTrailing = errors.New("wire: trailing bytes after the last field of the frame")
	// ErrUnknownChannel is [taskid.ErrUnknownChannel], re-exported so that
	// code handling wire faults needs only this package. The wire package
	// itself does not return it: only the connection's channel table knows
	// which numbers are open.
	ErrUnknownChannel = taskid.ErrUnknownChannel
)

// VersionError reports a preface whose version differs from this side's.
// It matches [ErrVersion] with [errors.Is].
type VersionError struct {
	Got  uint8 // the version the peer sent
	Want uint8 // the version this side speaks
}

// Error says which versions the two sides speak.
func (e *VersionError) Error() string {
	return "wire: unsupported protocol version: the peer speaks version " + strconv.Itoa(int(e.Got)) +
		", this node speaks version " + strconv.Itoa(int(e.Want)) + " (upgrade the older side)"
}

// Is reports whether target is [ErrVersion].
func (e *VersionError) Is(target error) bool { return target == ErrVersion }

// FrameError is a protocol fault found in one frame. Err is one of the
// package's sentinels, so errors.Is(err, ErrVarint) and friends see through
// it. Offset is the byte offset inside the frame's body where the faulty
// field starts, or -1 when the fault is in the header (unknown type, too
// large, checksum). Detail says which field and why, for a person reading a
// log line.
type FrameError struct {
	Type   FrameType
	Offset int
	Err    error
	Detail string
}

// Error reads "<sentinel>: <TYPE> frame, body offset N: <detail>", the
// offset left out for header faults.
func (e *FrameError) Error() string {
	s := e.Err.Error() + ": " + e.Type.String() + " frame"
	if e.Offset >= 0 {
		s += ", body offset " + strconv.Itoa(e.Offset)
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Unwrap returns the sentinel.
func (e *FrameError) Unwrap() error { return e.Err }

func frameErr(t FrameType, off int, err error, format string, args ...any) error {
	return &FrameError{Type: t, Offset: off, Err: err, Detail: fmt.Sprintf(format, args...)}
}
