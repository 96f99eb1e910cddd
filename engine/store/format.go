package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/sluicehq/sluice/internal/crcframe"
)

// The on-disk form of one record batch, the unit of atomicity of the log.
//
//	offset size field
//	0      4    magic "SLB1"
//	4      4    body length in bytes, little endian
//	8      4    record count, little endian, at least 1
//	12     8    minimum record timestamp, little endian two's complement
//	20     8    maximum record timestamp
//	28     4    CRC-32C (Castagnoli) of bytes 4..28 followed by the body
//	32     n    body: per record, uvarint(ts - minTs), uvarint(len), payload
//
// The delta ts - minTs is computed in uint64 arithmetic, so every pair of
// int64 timestamps fits. A segment file is a sequence of batches with nothing
// between them.
const (
	headerLen = 32

	// MaxBatchBytes is the largest body a batch may have. Append rejects a
	// larger batch with [ErrBatchTooLarge]; on recovery a header claiming a
	// larger body is a torn tail, never an allocation. It is part of the
	// format: changing it could make valid batches unreadable.
	MaxBatchBytes = 64 << 20
)

var (
	batchMagic = [4]byte{'S', 'L', 'B', '1'}
	// batchLayout is the framing of a batch: its length at 4, its CRC at
	// 28, covering bytes 4..28 and the body.
	batchLayout = crcframe.Layout{HeaderLen: headerLen, LenAt: 4, CRCAt: 28, CoverFrom: 4, CoverTo: 28}
)

// Errors returned by the log.
var (
	// ErrBatchTooLarge means an Append batch encodes to more than
	// MaxBatchBytes of body.
	ErrBatchTooLarge = errors.New("store: batch too large")
	// ErrClosed means the log has been closed.
	ErrClosed = errors.New("store: log closed")
	// ErrCorrupt is wrapped by [*CorruptError]: data that cannot be a torn
	// tail (it is followed by a later segment, or it changed after Open)
	// failed verification.
	ErrCorrupt = errors.New("store: corrupt segment")
	// ErrSyncFailed is wrapped by the error of [Open] for a directory
	// whose log once failed an fsync (see [SyncFailedFile]), and by the
	// error of every call of a Log after one of its fsyncs failed: its
	// records may be lost, unlike after a failed write that was undone.
	ErrSyncFailed = errors.New("store: an fsync of the log failed, so records it acknowledged may not be on disk")
)

// CorruptError reports a batch that failed verification where a torn tail
// is impossible: in a sealed segment, or during Replay of data that was
// verified at Open. It wraps [ErrCorrupt].
type CorruptError struct {
	Segment string // path of the segment file
	Offset  int64  // byte offset of the bad batch within the segment
	Reason  string // what failed, for example "CRC mismatch"
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("store: corrupt segment %s at offset %d: %s", e.Segment, e.Offset, e.Reason)
}

// Unwrap returns ErrCorrupt.
func (e *CorruptError) Unwrap() error { return ErrCorrupt }

// header is a decoded batch header.
type header struct {
	bodyLen int
	count   int
	minTs   int64
	maxTs   int64
	crc     uint32
}

// tornError says why a batch is not valid data. Recovery turns it into a
// cut; Replay into a CorruptError.
type tornError string

func (e tornError) Error() string { return string(e) }

const (
	errBadMagic    tornError = "bad magic"
	errBodyTooLong tornError = "claimed body length exceeds the batch limit"
	errBodyPastEOF tornError = "body extends past the end of the segment"
	errShortHeader tornError = "partial header"
	errBadCRC      tornError = "CRC mismatch"
	errBadCount    tornError = "record count is zero or exceeds the body"
	errBadTsRange  tornError = "minimum timestamp above maximum"
	errBadRecords  tornError = "records do not match the header"
)

// appendBatch appends the encoded batch of recs to dst. recs must not be
// empty.
func appendBatch(dst []byte, recs []Record) ([]byte, error) {
	minTs, maxTs := int64(math.MaxInt64), int64(math.MinInt64)
	body := 0
	for i := range recs {
		ts := recs[i].Ts
		minTs = min(minTs, ts)
		maxTs = max(maxTs, ts)
		body += len(recs[i].Payload)
	}
	// Upper bound of the varints, cheap to compute; the exact check follows.
	if body > MaxBatchBytes || len(recs) > MaxBatchBytes/2 {
		return dst, fmt.Errorf("%w: %d records, %d payload bytes (limit %d)", ErrBatchTooLarge, len(recs), body, MaxBatchBytes)
	}
	start := len(dst)
	need := headerLen + body + len(recs)*(binary.MaxVarintLen64+binary.MaxVarintLen32)
	dst = grow(dst, need)
	dst = dst[:start+headerLen]
	for i := range recs {
		dst = binary.AppendUvarint(dst, uint64(recs[i].Ts)-uint64(minTs))
		dst = binary.AppendUvarint(dst, uint64(len(recs[i].Payload)))
		dst = append(dst, recs[i].Payload...)
	}
	bodyLen := len(dst) - start - headerLen
	if bodyLen > MaxBatchBytes {
		return dst[:start], fmt.Errorf("%w: %d bytes of body (limit %d)", ErrBatchTooLarge, bodyLen, MaxBatchBytes)
	}
	h := dst[start : start+headerLen]
	copy(h[0:4], batchMagic[:])
	binary.LittleEndian.PutUint32(h[8:12], uint32(len(recs)))
	binary.LittleEndian.PutUint64(h[12:20], uint64(minTs))
	binary.LittleEndian.PutUint64(h[20:28], uint64(maxTs))
	batchLayout.Seal(h, dst[start+headerLen:])
	return dst, nil
}

func grow(b []byte, n int) []byte {
	if cap(b)-len(b) >= n {
		return b
	}
	nb := make([]byte, len(b), len(b)+n)
	copy(nb, b)
	return nb
}

// decodeHeader checks the fields of h that can be checked without the body.
func decodeHeader(h []byte) (header, error) {
	if [4]byte(h[0:4]) != batchMagic {
		return header{}, errBadMagic
	}
	bl := batchLayout.BodyLen(h)
	if bl > MaxBatchBytes {
		return header{}, errBodyTooLong
	}
	hd := header{
		bodyLen: int(bl),
		count:   int(binary.LittleEndian.Uint32(h[8:12])),
		minTs:   int64(binary.LittleEndian.Uint64(h[12:20])),
		maxTs:   int64(binary.LittleEndian.Uint64(h[20:28])),
		crc:     batchLayout.Stored(h),
	}
	// Each record takes at least two bytes (two one-byte varints).
	if hd.count == 0 || hd.count > hd.bodyLen/2 {
		return header{}, errBadCount
	}
	if hd.minTs > hd.maxTs {
		return header{}, errBadTsRange
	}
	return hd, nil
}

// checkCRC verifies the batch checksum over the header h and body.
func checkCRC(h []byte, hd header, body []byte) error {
	if batchLayout.Sum(h, body) != hd.crc {
		return errBadCRC
	}
	return nil
}

// maxRun is the most records Replay passes to its callback at once, so that
// a batch of many tiny records never needs a record slice as large as the
// batch.
const maxRun = 1024

// decodeRecords decodes the records of body and checks that the body holds
// exactly hd.count records with timestamps inside [hd.minTs, hd.maxTs].
//
// With emit nil it only verifies. Otherwise it passes the records whose
// Ts >= fromTs to emit in runs of at most maxRun, collected in run (reused;
// returned for the next call). Payloads alias body. An error from emit is
// returned as is; a malformed body yields a tornError, possibly after some
// runs were emitted (callers check the CRC first, so that only a writer bug
// could get there).
func decodeRecords(run []Record, body []byte, hd header, fromTs int64, emit func([]Record) error) ([]Record, error) {
	run = run[:0]
	span := uint64(hd.maxTs) - uint64(hd.minTs)
	for range hd.count {
		d, n := binary.Uvarint(body)
		if n <= 0 || d > span {
			return run, errBadRecords
		}
		body = body[n:]
		l, n := binary.Uvarint(body)
		if n <= 0 || l > uint64(len(body)-n) {
			return run, errBadRecords
		}
		body = body[n:]
		ts := int64(uint64(hd.minTs) + d)
		if emit != nil && ts >= fromTs {
			run = append(run, Record{Ts: ts, Payload: body[:l:l]})
			if len(run) == maxRun {
				if err := emit(run); err != nil {
					return run, err
				}
				run = run[:0]
			}
		}
		body = body[l:]
	}
	if len(body) != 0 {
		return run, errBadRecords
	}
	if len(run) > 0 {
		if err := emit(run); err != nil {
			return run, err
		}
	}
	return run[:0], nil
}
