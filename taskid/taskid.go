// Package taskid names the tasks of a stream-processing job and the channels
// between them.
//
// A task is identified by an [ID]: the processor it belongs to and its index
// among that processor's parallel instances. On the wire an ID is two
// unsigned varints, so small jobs spend two bytes per ID. IDs only travel in
// the frames that open a channel: once a channel (source, target, epoch) is
// open on a connection, data carries a small channel number assigned by the
// connection's [Table], never the two task ids.
package taskid

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ID identifies one task: Index is the task's position among the parallel
// instances of Processor. IDs are comparable and usable as map keys.
type ID struct {
	Processor uint32
	Index     uint32
}

// String formats the ID as "processor.index", for example "3.17".
func (id ID) String() string {
	var buf [24]byte
	b := strconv.AppendUint(buf[:0], uint64(id.Processor), 10)
	b = append(b, '.')
	b = strconv.AppendUint(b, uint64(id.Index), 10)
	return string(b)
}

// Parse reads an ID in the form printed by [ID.String], "processor.index".
func Parse(s string) (ID, error) {
	p, i, ok := strings.Cut(s, ".")
	if !ok {
		return ID{}, fmt.Errorf("taskid: %q is not of the form processor.index, for example 3.17", s)
	}
	proc, err := strconv.ParseUint(p, 10, 32)
	if err != nil {
		return ID{}, fmt.Errorf("taskid: processor in %q: %w", s, err)
	}
	idx, err := strconv.ParseUint(i, 10, 32)
	if err != nil {
		return ID{}, fmt.Errorf("taskid: index in %q: %w", s, err)
	}
	return ID{Processor: uint32(proc), Index: uint32(idx)}, nil
}

// MaxEncodedLen is the largest number of bytes [Append] writes for one ID.
const MaxEncodedLen = 2 * binary.MaxVarintLen32

// Errors returned by [Decode].
var (
	// ErrShort means the input ends inside an ID; more bytes may complete it.
	ErrShort = errors.New("taskid: input ends inside a task id")
	// ErrOverflow means a varint of the ID does not fit in 32 bits or is
	// longer than its canonical form: the input is corrupt.
	ErrOverflow = errors.New("taskid: task id varint overflows 32 bits")
)

// Append appends the compact form of id to dst: Processor then Index, each an
// unsigned LEB128 varint.
func Append(dst []byte, id ID) []byte {
	dst = binary.AppendUvarint(dst, uint64(id.Processor))
	return binary.AppendUvarint(dst, uint64(id.Index))
}

// EncodedLen is the number of bytes [Append] writes for id.
func EncodedLen(id ID) int {
	return uvarintLen(uint64(id.Processor)) + uvarintLen(uint64(id.Index))
}

// Decode reads an ID written by [Append] from the start of b and returns it
// with the number of bytes it used. It does not allocate.
func Decode(b []byte) (ID, int, error) {
	p, n1, err := uvarint32(b)
	if err != nil {
		return ID{}, 0, err
	}
	i, n2, err := uvarint32(b[n1:])
	if err != nil {
		return ID{}, 0, err
	}
	return ID{Processor: p, Index: i}, n1 + n2, nil
}

func uvarint32(b []byte) (uint32, int, error) {
	var x uint32
	for i := 0; i < binary.MaxVarintLen32; i++ {
		if i == len(b) {
			return 0, 0, ErrShort
		}
		c := b[i]
		if i == binary.MaxVarintLen32-1 && c > 0x0f {
			return 0, 0, ErrOverflow
		}
		x |= uint32(c&0x7f) << (7 * i)
		if c < 0x80 {
			if c == 0 && i > 0 {
				return 0, 0, ErrOverflow // non-canonical: a trailing zero byte
			}
			return x, i + 1, nil
		}
	}
	return 0, 0, ErrOverflow
}

func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}
