package watermill

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/ThreeDotsLabs/watermill/message"
)

// The encoding of one Watermill message as the payload of one Sluice
// message (README, "Encoding"):
//
//	flags    1 byte: bit 0 set = the UUID is packed; bits 1-7 reserved, zero
//	uuid     packed: 16 bytes, the canonical 36-character lowercase form
//	         (8-4-4-4-12 hex digits) as binary; otherwise uvarint length + bytes
//	count    uvarint, the number of metadata entries
//	entries  count × (uvarint key length, key, uvarint value length, value),
//	         keys in strictly increasing byte order
//	payload  the rest of the message
//
// Varints are minimal (the shortest form of their value). Every message has
// exactly one encoding, so decoding and re-encoding gives back the input.
const flagPackedUUID = 1

// Errors returned by Decode, wrapped in a *DecodeError. Test them with
// errors.Is.
var (
	// ErrTruncated means the input ends inside a field.
	ErrTruncated = errors.New("watermill: message ends inside a field")
	// ErrReservedFlags means flag bits this version does not define are set.
	ErrReservedFlags = errors.New("watermill: reserved flag bits set")
	// ErrVarint means a length or count varint overflows or is not in its
	// shortest form.
	ErrVarint = errors.New("watermill: malformed varint")
	// ErrTooLong means a length or count is larger than the rest of the input
	// can hold.
	ErrTooLong = errors.New("watermill: length beyond the end of the message")
	// ErrKeyOrder means metadata keys are not in strictly increasing order
	// (a duplicate key is one such case).
	ErrKeyOrder = errors.New("watermill: metadata keys out of order or repeated")
	// ErrUnpackedUUID means a UUID in canonical form was written as a string,
	// which the encoder never does.
	ErrUnpackedUUID = errors.New("watermill: canonical UUID not packed")
)

// DecodeError is why Decode refused its input: Err (one of the sentinels
// above) at byte Offset, in Field.
type DecodeError struct {
	Field  string
	Offset int
	Err    error
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("watermill: decoding %s at byte %d: %v", e.Field, e.Offset, e.Err)
}

func (e *DecodeError) Unwrap() error { return e.Err }

// AppendMessage appends the encoding of msg's UUID, metadata and payload to
// dst and returns the extended slice. It does not keep msg or dst.
func AppendMessage(dst []byte, msg *message.Message) []byte {
	if u, ok := packUUID(msg.UUID); ok {
		dst = append(dst, flagPackedUUID)
		dst = append(dst, u[:]...)
	} else {
		dst = append(dst, 0)
		dst = appendString(dst, msg.UUID)
	}
	dst = binary.AppendUvarint(dst, uint64(len(msg.Metadata)))
	switch len(msg.Metadata) {
	case 0:
	case 1:
		for k, v := range msg.Metadata {
			dst = appendString(appendString(dst, k), v)
		}
	default:
		keys := make([]string, 0, len(msg.Metadata))
		for k := range msg.Metadata {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			dst = appendString(appendString(dst, k), msg.Metadata[k])
		}
	}
	return append(dst, msg.Payload...)
}

func appendString(dst []byte, s string) []byte {
	return append(binary.AppendUvarint(dst, uint64(len(s))), s...)
}

// DecodeMessage decodes what AppendMessage wrote into a new message. The
// message copies everything it takes from b, so b may be reused at once.
// Malformed input gives a *DecodeError.
func DecodeMessage(b []byte) (*message.Message, error) {
	d := decoder{b: b}
	flags, err := d.byte("flags")
	if err != nil {
		return nil, err
	}
	if flags&^flagPackedUUID != 0 {
		return nil, d.fail("flags", 0, ErrReservedFlags)
	}
	var id string
	if flags&flagPackedUUID != 0 {
		raw, err := d.bytes("uuid", 16)
		if err != nil {
			return nil, err
		}
		id = unpackUUID(raw)
	} else {
		at := d.off
		if id, err = d.string("uuid"); err != nil {
			return nil, err
		}
		if _, ok := packUUID(id); ok {
			return nil, d.fail("uuid", at, ErrUnpackedUUID)
		}
	}
	at := d.off
	n, err := d.uvarint("metadata count")
	if err != nil {
		return nil, err
	}
	// Each entry takes at least two bytes (two empty lengths): a count the
	// rest cannot hold is refused before anything is allocated for it.
	if n > uint64(len(d.b)-d.off)/2 {
		return nil, d.fail("metadata count", at, ErrTooLong)
	}
	md := make(message.Metadata, n)
	var prev string
	for i := range n {
		at := d.off
		k, err := d.string("metadata key")
		if err != nil {
			return nil, err
		}
		if i > 0 && k <= prev {
			return nil, d.fail("metadata key", at, ErrKeyOrder)
		}
		v, err := d.string("metadata value")
		if err != nil {
			return nil, err
		}
		md[k], prev = v, k
	}
	msg := message.NewMessage(id, append([]byte(nil), d.b[d.off:]...))
	msg.Metadata = md
	return msg, nil
}

type decoder struct {
	b   []byte
	off int
}

func (d *decoder) fail(field string, at int, err error) error {
	return &DecodeError{Field: field, Offset: at, Err: err}
}

func (d *decoder) byte(field string) (byte, error) {
	if d.off >= len(d.b) {
		return 0, d.fail(field, d.off, ErrTruncated)
	}
	c := d.b[d.off]
	d.off++
	return c, nil
}

func (d *decoder) bytes(field string, n int) ([]byte, error) {
	if n > len(d.b)-d.off {
		return nil, d.fail(field, d.off, ErrTruncated)
	}
	p := d.b[d.off : d.off+n]
	d.off += n
	return p, nil
}

func (d *decoder) uvarint(field string) (uint64, error) {
	v, n := binary.Uvarint(d.b[d.off:])
	switch {
	case n == 0:
		return 0, d.fail(field, d.off, ErrTruncated)
	case n < 0:
		return 0, d.fail(field, d.off, ErrVarint)
	case n != uvarintLen(v):
		return 0, d.fail(field, d.off, ErrVarint)
	}
	d.off += n
	return v, nil
}

func (d *decoder) string(field string) (string, error) {
	at := d.off
	n, err := d.uvarint(field)
	if err != nil {
		return "", err
	}
	if n > uint64(len(d.b)-d.off) {
		return "", d.fail(field, at, ErrTooLong)
	}
	s := string(d.b[d.off : d.off+int(n)])
	d.off += int(n)
	return s, nil
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// packUUID packs a canonical lowercase UUID string (what watermill.NewUUID
// returns) into 16 bytes; any other string is not packed.
func packUUID(s string) (u [16]byte, ok bool) {
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return u, false
	}
	j := 0
	for i := 0; i < 36; i += 2 {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			i++
		}
		hi, ok1 := fromHex(s[i])
		lo, ok2 := fromHex(s[i+1])
		if !ok1 || !ok2 {
			return u, false
		}
		u[j] = hi<<4 | lo
		j++
	}
	return u, true
}

func fromHex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

func unpackUUID(b []byte) string {
	const hexDigits = "0123456789abcdef"
	var s [36]byte
	j := 0
	for i, c := range b {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			s[j] = '-'
			j++
		}
		s[j], s[j+1] = hexDigits[c>>4], hexDigits[c&0xf]
		j += 2
	}
	return string(s[:])
}
