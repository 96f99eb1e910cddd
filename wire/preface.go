package wire

import (
	"encoding/binary"
	"fmt"
)

// Connection preface constants. Each side sends a preface as its first bytes
// and reads the peer's before any frame.
const (
	Magic      = "SLCE" // the first four bytes of every connection
	Version    = 1      // the protocol version this package speaks
	PrefaceLen = 16     // the preface's fixed length
)

// Preface flags: what the sending side offers or requires.
const (
	// FlagCompression means the sender accepts s2-compressed DATA bodies
	// ([DataCompressed]). A side sends compressed DATA only if the peer set
	// this flag.
	FlagCompression uint8 = 1 << 0
	// FlagAuth means the sender expects the authentication exchange that
	// the transport defines before data flows.
	FlagAuth uint8 = 1 << 1
)

// Preface is a decoded connection preface.
type Preface struct {
	Version uint8  // [Version] when written by this package
	Flags   uint8  // FlagCompression, FlagAuth; other bits are reserved and ignored
	NodeID  uint64 // the sending node's id, chosen by the embedding engine
}

// AppendPreface appends the 16-byte preface p to dst and returns the extended
// slice. A zero p.Version is written as [Version], so callers normally leave
// it unset.
func AppendPreface(dst []byte, p Preface) []byte {
	v := p.Version
	if v == 0 {
		v = Version
	}
	dst = append(dst, Magic...)
	dst = append(dst, v, p.Flags, 0, 0)
	return binary.BigEndian.AppendUint64(dst, p.NodeID)
}

// DecodePreface decodes the preface at the start of b and returns it with the
// number of bytes consumed, always PrefaceLen on success. It fails fast: it
// returns an error matching [ErrBadMagic] as soon as the bytes present
// disagree with the magic, a [*VersionError] (matching [ErrVersion]) as soon
// as the version byte is present and differs from [Version], and an error
// matching [ErrReserved] if the reserved bytes are not zero. Otherwise, while
// fewer than PrefaceLen bytes are present, it returns [ErrNeedMore] and 0.
// The result does not alias b. Unknown flag bits are passed through in
// Preface.Flags and otherwise ignored.
func DecodePreface(b []byte) (Preface, int, error) {
	for i := 0; i < len(Magic) && i < len(b); i++ {
		if b[i] != Magic[i] {
			return Preface{}, 0, fmt.Errorf("%w: the first bytes are %q, want %q (is the peer a Sluice node of this version, without TLS?)",
				ErrBadMagic, b[:min(len(b), len(Magic))], Magic)
		}
	}
	if len(b) > 4 && b[4] != Version {
		return Preface{}, 0, &VersionError{Got: b[4], Want: Version}
	}
	for i := 6; i < 8 && i < len(b); i++ {
		if b[i] != 0 {
			return Preface{}, 0, fmt.Errorf("%w: preface byte %d is 0x%02x, version %d requires 0", ErrReserved, i, b[i], Version)
		}
	}
	if len(b) < PrefaceLen {
		return Preface{}, 0, ErrNeedMore
	}
	return Preface{Version: b[4], Flags: b[5], NodeID: binary.BigEndian.Uint64(b[8:16])}, PrefaceLen, nil
}
