// Package crcframe is the framing that the wire format, the source message
// store (engine/store) and the checkpoint files (engine/checkpoint) share: a
// fixed-size header that holds the body's length and a CRC-32C (Castagnoli)
// of a span of the header followed by the body. Each format keeps its own
// byte layout, which a [Layout] describes (where the length and the CRC sit,
// which header bytes the CRC covers, the byte order), so that sealing a frame
// and checking one are written once. It has no I/O: a body too large to
// hold in memory (a checkpoint file) is streamed through [Layout.Hash].
package crcframe

import (
	"encoding/binary"
	"hash"

	"github.com/sluicehq/sluice/internal/crc32c"
)

// Layout is where a format keeps the body length and the CRC in its header.
// The zero value is not useful; formats declare theirs as package variables.
type Layout struct {
	HeaderLen int  // bytes before the body
	LenAt     int  // offset of the body length
	Len64     bool // the length takes 8 bytes, else 4
	CRCAt     int  // offset of the 4-byte CRC
	// The CRC covers header bytes [CoverFrom, CoverTo) and then the body;
	// CoverFrom == CoverTo: the body alone.
	CoverFrom, CoverTo int
	BigEndian          bool // else little endian
}

func (l *Layout) order() binary.ByteOrder {
	if l.BigEndian {
		return binary.BigEndian
	}
	return binary.LittleEndian
}

// Seal writes len(body) and the CRC into the header h (HeaderLen bytes,
// with every covered field already set). The caller checks that the length
// fits its field.
func (l *Layout) Seal(h, body []byte) {
	o := l.order()
	if l.Len64 {
		o.PutUint64(h[l.LenAt:], uint64(len(body)))
	} else {
		o.PutUint32(h[l.LenAt:], uint32(len(body)))
	}
	o.PutUint32(h[l.CRCAt:], l.Sum(h, body))
}

// BodyLen returns the body length header h claims. It is the caller's to
// check against its limits before it reads or allocates that much.
func (l *Layout) BodyLen(h []byte) uint64 {
	if l.Len64 {
		return l.order().Uint64(h[l.LenAt:])
	}
	return uint64(l.order().Uint32(h[l.LenAt:]))
}

// Stored returns the CRC header h carries.
func (l *Layout) Stored(h []byte) uint32 { return l.order().Uint32(h[l.CRCAt:]) }

// Sum returns the CRC of h's covered bytes followed by body.
func (l *Layout) Sum(h, body []byte) uint32 {
	return crc32c.Update(crc32c.Update(0, h[l.CoverFrom:l.CoverTo]), body)
}

// Check reports whether body matches the CRC in h, and returns the CRC it
// computed (for an error message).
func (l *Layout) Check(h, body []byte) (sum uint32, ok bool) {
	sum = l.Sum(h, body)
	return sum, sum == l.Stored(h)
}

// Hash returns a CRC-32C already fed h's covered bytes: write the body
// through it, then compare its Sum32 with Stored(h).
func (l *Layout) Hash(h []byte) hash.Hash32 {
	d := crc32c.New()
	d.Write(h[l.CoverFrom:l.CoverTo])
	return d
}
