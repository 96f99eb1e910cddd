package journal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/sluicehq/sluice/internal/crcframe"
)

// The file starts with fileMagic; records follow, each a 9-byte header and
// a body:
//
//	offset size field
//	0      4    CRC-32C (Castagnoli) of bytes 4..9 followed by the body
//	4      4    body length (little endian)
//	8      1    kind
//	9      n    body
//
// Bodies are varints (unsigned for counts and generations, zigzag for
// timestamps) and length-prefixed byte strings; a body must be consumed
// exactly.
//
// Version 2 added the Commit record. A version 1 journal is read as it
// is, with the floor its records imply (see [State]), and [Open] turns it
// into a version 2 one before anything is appended, so that an engine that
// knows only version 1 refuses a journal holding a Commit instead of
// reading it as damage.
const (
	fileMagic   = "SLJN\x00\x00\x00\x02" // "SLJN", format version 2
	fileMagicV1 = "SLJN\x00\x00\x00\x01" // version 1: no Commit records
	headerLen   = 9
	// MaxBody bounds a record's body (a Job's config is the largest).
	MaxBody = 1 << 20
)

var layout = crcframe.Layout{HeaderLen: headerLen, CRCAt: 0, LenAt: 4, CoverFrom: 4, CoverTo: headerLen}

// Kind is a record's type.
type Kind uint8

// The record kinds.
const (
	KindJob        Kind = 1
	KindGeneration Kind = 2
	KindCheckpoint Kind = 3
	KindCommit     Kind = 4 // since version 2
)

// Record is one journal entry: a *[Job], *[Generation], *[Checkpoint] or
// *[Commit].
type Record interface {
	Kind() Kind
	appendBody(dst []byte) []byte
	decodeBody(b []byte) error
}

// Job is the journal's first record: what runs and where. A coordinator
// resumes a journal only for an equal Job.
type Job struct {
	// Config is the caller's description of the job and its input (for
	// loadgen, the job's JSON spec); compared byte for byte.
	Config []byte
	// Shape is the engine's description of the DAG: processors,
	// parallelism, edges and partitioners.
	Shape string
	// Nodes is the number of workers.
	Nodes int
	// Placement is the node of each task, in the job's task order.
	Placement []int
}

// Generation is written before a generation starts: its number, which
// every channel uses as its epoch, and the checkpoint it restores.
type Generation struct {
	Gen        uint64
	Restore    int64
	HasRestore bool
	// Interval is the checkpoint interval, in timestamp units, it starts
	// with.
	Interval int64
}

// Checkpoint is written once every worker has persisted the checkpoint at
// Ts, before the coordinator lets sources delete what it covers.
type Checkpoint struct {
	Gen uint64
	Ts  int64
	// Interval is the checkpoint interval from here on.
	Interval int64
}

// Commit is written before the coordinator lets the sources delete the
// records of their logs below Keep, the oldest checkpoint recovery may
// still choose: from then on the job can resume only from a checkpoint at
// or after Keep.
type Commit struct {
	Gen  uint64
	Keep int64
}

// Kind reports KindJob.
func (*Job) Kind() Kind { return KindJob }

// Kind reports KindGeneration.
func (*Generation) Kind() Kind { return KindGeneration }

// Kind reports KindCheckpoint.
func (*Checkpoint) Kind() Kind { return KindCheckpoint }

// Kind reports KindCommit.
func (*Commit) Kind() Kind { return KindCommit }

// Errors of the format.
var (
	// ErrIncomplete means the bytes end inside a record: more are needed.
	ErrIncomplete = errors.New("journal: incomplete record")
	// ErrCorrupt is wrapped by every error about bytes that are not a
	// valid journal, and by [*CorruptError].
	ErrCorrupt = errors.New("journal: corrupt")
	// ErrTooLarge means a record's body would exceed MaxBody.
	ErrTooLarge = errors.New("journal: record too large")
)

// formatError says why bytes are not a valid record.
type formatError string

func (e formatError) Error() string { return "journal: " + string(e) }
func (e formatError) Unwrap() error { return ErrCorrupt }

const (
	errBodyTooLong formatError = "claimed body length exceeds the limit"
	errBadCRC      formatError = "CRC mismatch"
	errUnknownKind formatError = "unknown record kind"
	errBadBody     formatError = "body does not match its kind"
)

// AppendRecord appends r's framed encoding to dst.
func AppendRecord(dst []byte, r Record) ([]byte, error) {
	start := len(dst)
	dst = append(dst, make([]byte, headerLen)...)
	dst = r.appendBody(dst)
	body := len(dst) - start - headerLen
	if body > MaxBody {
		return dst[:start], fmt.Errorf("%w: %d bytes (limit %d)", ErrTooLarge, body, MaxBody)
	}
	h := dst[start : start+headerLen]
	h[8] = byte(r.Kind())
	layout.Seal(h, dst[start+headerLen:])
	return dst, nil
}

// DecodeRecord decodes the record at the start of b and returns it with the
// bytes it took. It returns ErrIncomplete when b ends inside the record,
// and an error wrapping ErrCorrupt when the bytes are not a valid record.
// The record does not alias b.
func DecodeRecord(b []byte) (Record, int, error) {
	if len(b) < headerLen {
		return nil, 0, ErrIncomplete
	}
	h := b[:headerLen]
	n := layout.BodyLen(h)
	if n > MaxBody {
		return nil, 0, errBodyTooLong
	}
	if uint64(len(b)-headerLen) < n {
		return nil, 0, ErrIncomplete
	}
	body := b[headerLen : headerLen+int(n)]
	if _, ok := layout.Check(h, body); !ok {
		return nil, 0, errBadCRC
	}
	var r Record
	switch Kind(h[8]) {
	case KindJob:
		r = &Job{}
	case KindGeneration:
		r = &Generation{}
	case KindCheckpoint:
		r = &Checkpoint{}
	case KindCommit:
		r = &Commit{}
	default:
		return nil, 0, errUnknownKind
	}
	if err := r.decodeBody(body); err != nil {
		return nil, 0, err
	}
	return r, headerLen + int(n), nil
}

func (j *Job) appendBody(dst []byte) []byte {
	dst = appendBytes(dst, j.Config)
	dst = appendBytes(dst, []byte(j.Shape))
	dst = binary.AppendUvarint(dst, uint64(j.Nodes))
	dst = binary.AppendUvarint(dst, uint64(len(j.Placement)))
	for _, p := range j.Placement {
		dst = binary.AppendUvarint(dst, uint64(p))
	}
	return dst
}

func (j *Job) decodeBody(b []byte) error {
	d := decoder{b: b}
	j.Config = d.bytes()
	j.Shape = string(d.bytes())
	j.Nodes = d.int()
	n := d.int()
	if n > len(d.b) { // each entry takes at least a byte
		return errBadBody
	}
	j.Placement = nil // an empty placement decodes as it was encoded
	for range n {
		j.Placement = append(j.Placement, d.int())
	}
	return d.done()
}

func (g *Generation) appendBody(dst []byte) []byte {
	dst = binary.AppendUvarint(dst, g.Gen)
	dst = binary.AppendVarint(dst, g.Restore)
	if g.HasRestore {
		dst = append(dst, 1)
	} else {
		dst = append(dst, 0)
	}
	return binary.AppendVarint(dst, g.Interval)
}

func (g *Generation) decodeBody(b []byte) error {
	d := decoder{b: b}
	g.Gen = d.uvarint()
	g.Restore = d.varint()
	switch d.byte() {
	case 0:
	case 1:
		g.HasRestore = true
	default:
		d.err = errBadBody
	}
	g.Interval = d.varint()
	return d.done()
}

func (c *Checkpoint) appendBody(dst []byte) []byte {
	dst = binary.AppendUvarint(dst, c.Gen)
	dst = binary.AppendVarint(dst, c.Ts)
	return binary.AppendVarint(dst, c.Interval)
}

func (c *Checkpoint) decodeBody(b []byte) error {
	d := decoder{b: b}
	c.Gen = d.uvarint()
	c.Ts = d.varint()
	c.Interval = d.varint()
	return d.done()
}

func (c *Commit) appendBody(dst []byte) []byte {
	dst = binary.AppendUvarint(dst, c.Gen)
	return binary.AppendVarint(dst, c.Keep)
}

func (c *Commit) decodeBody(b []byte) error {
	d := decoder{b: b}
	c.Gen = d.uvarint()
	c.Keep = d.varint()
	return d.done()
}

func appendBytes(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

// decoder reads a body; the first error sticks.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errBadBody
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = errBadBody
		return 0
	}
	d.b = d.b[n:]
	return v
}

// int reads a non-negative count that must fit an int.
func (d *decoder) int() int {
	v := d.uvarint()
	if v > math.MaxInt32 {
		d.err = errBadBody
		return 0
	}
	return int(v)
}

func (d *decoder) byte() byte {
	if d.err != nil || len(d.b) == 0 {
		d.err = errBadBody
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.err = errBadBody
		return nil
	}
	out := append([]byte(nil), d.b[:n]...)
	d.b = d.b[n:]
	return out
}

func (d *decoder) done() error {
	if d.err == nil && len(d.b) != 0 {
		d.err = errBadBody
	}
	return d.err
}
