package wire

import (
	"encoding/binary"
	"math"
	"math/bits"
)

// Varints are unsigned LEB128 (encoding/binary's Uvarint) and zigzag signed
// varints (binary.Varint). The decoders here differ from encoding/binary in
// three ways that matter on the hot path and for strictness: they take an
// offset and return the next one, so a decode loop keeps a single index; the
// one-byte case is a separate inlinable fast path; and they accept only the
// canonical (shortest) form, so every decodable body re-encodes to the same
// bytes.

// Failure codes returned in place of the next offset. All are negative.
const (
	varTruncated    = -1 // the body ends inside the varint
	varTooLong      = -2 // more than 10 bytes
	varOverflow64   = -3 // the 10th byte carries bits above 64
	varNonCanonical = -4 // a trailing zero group: a longer form than needed
	varOverflow32   = -5 // a 32-bit field holds a larger value
)

func varintDetail(code int) string {
	switch code {
	case varTruncated:
		return "the body ends inside the varint"
	case varTooLong:
		return "the varint is longer than 10 bytes"
	case varOverflow64:
		return "the varint overflows 64 bits"
	case varNonCanonical:
		return "the varint is not in its shortest form"
	case varOverflow32:
		return "the value does not fit in 32 bits"
	}
	return "bad varint"
}

func varintErr(t FrameType, off, code int, field string) error {
	return frameErr(t, off, ErrVarint, "%s: %s", field, varintDetail(code))
}

// uvarint decodes the unsigned varint at b[off:]. It returns the value and
// the offset just after it, or a negative failure code as next.
func uvarint(b []byte, off int) (v uint64, next int) {
	if off < len(b) {
		if c := b[off]; c < 0x80 {
			return uint64(c), off + 1
		}
	}
	return uvarintSlow(b, off)
}

func uvarintSlow(b []byte, off int) (uint64, int) {
	var x uint64
	var s uint
	for i := 0; i < binary.MaxVarintLen64; i++ {
		if off+i >= len(b) {
			return 0, varTruncated
		}
		c := b[off+i]
		if c < 0x80 {
			if i == binary.MaxVarintLen64-1 && c > 1 {
				return 0, varOverflow64
			}
			if c == 0 && i > 0 {
				return 0, varNonCanonical
			}
			return x | uint64(c)<<s, off + i + 1
		}
		x |= uint64(c&0x7f) << s
		s += 7
	}
	return 0, varTooLong
}

// uvarint32 is uvarint for a 32-bit field.
func uvarint32(b []byte, off int) (uint32, int) {
	v, next := uvarint(b, off)
	if next >= 0 && v > math.MaxUint32 {
		return 0, varOverflow32
	}
	return uint32(v), next
}

// svarint decodes a zigzag signed varint at b[off:].
func svarint(b []byte, off int) (int64, int) {
	u, next := uvarint(b, off)
	return unzigzag(u), next
}

func appendUvarint(dst []byte, v uint64) []byte {
	if v < 0x80 {
		return append(dst, byte(v))
	}
	return binary.AppendUvarint(dst, v)
}

func zigzag(v int64) uint64 { return uint64(v<<1) ^ uint64(v>>63) }

func unzigzag(u uint64) int64 { return int64(u>>1) ^ -int64(u&1) }

func appendSvarint(dst []byte, v int64) []byte { return appendUvarint(dst, zigzag(v)) }

// uvarintLen is the number of bytes appendUvarint writes for v.
func uvarintLen(v uint64) int { return (bits.Len64(v|1) + 6) / 7 }
