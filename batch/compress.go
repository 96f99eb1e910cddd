package batch

import (
	"errors"
	"slices"
	"strconv"

	"github.com/klauspost/compress/s2"
)

// Errors returned by [Decompress].
var (
	// ErrCorrupt means the input is not a valid s2 block.
	ErrCorrupt = errors.New("batch: corrupt compressed batch")
	// ErrTooLarge means the block would decode to more than the caller's
	// limit. The error returned is a [*TooLargeError], which matches
	// ErrTooLarge with errors.Is.
	ErrTooLarge = errors.New("batch: decompressed size exceeds limit")
)

// TooLargeError reports a compressed batch whose header announces more
// decoded bytes than allowed: a decompression bomb or a peer with a larger
// batch limit. It is detected before anything is decoded or allocated.
type TooLargeError struct {
	Size  int // decoded size the block announces
	Limit int // the caller's maxLen
}

// Error returns "batch: decompressed size N exceeds limit M".
func (e *TooLargeError) Error() string {
	return "batch: decompressed size " + strconv.Itoa(e.Size) + " exceeds limit " + strconv.Itoa(e.Limit)
}

// Is reports whether target is [ErrTooLarge].
func (e *TooLargeError) Is(target error) bool { return target == ErrTooLarge }

// MaxCompressBackoff is the most batches a [Compressor] skips between two
// attempts: after k consecutive incompressible batches it skips the next
// min(2^(k-1), MaxCompressBackoff), so a stream of random payloads costs
// about one encode in MaxCompressBackoff+1 batches.
const MaxCompressBackoff = 64

// CompressorStats are the counters of one [Compressor].
type CompressorStats struct {
	// Attempts counts batches that were encoded; Compressed those whose
	// encoding was small enough to send.
	Attempts, Compressed uint64
	// Skipped counts batches at or above the threshold that were not tried
	// because recent batches were incompressible.
	Skipped uint64
	// BytesIn and BytesOut are the sizes of the compressed batches before
	// and after compression.
	BytesIn, BytesOut uint64
}

// Compressor compresses outgoing batches with s2 block compression when it
// pays: batches below the threshold are sent as they are, an encoding that is
// not at least 1/8 smaller than its input is discarded, and after
// incompressible batches the Compressor backs off (see [MaxCompressBackoff]).
//
// A Compressor keeps one scratch buffer as large as the largest encoding it
// made, so that a discarded encoding costs no allocation. It belongs to one
// connection and is not safe for concurrent use.
type Compressor struct {
	threshold int
	scratch   []byte
	misses    int // consecutive incompressible attempts
	skip      int // batches still to skip before the next attempt
	stats     CompressorStats
}

// NewCompressor returns a Compressor that tries batches of at least threshold
// bytes, normally [Config.CompressThreshold]. A threshold <= 0 means never
// compress.
func NewCompressor(threshold int) *Compressor {
	return &Compressor{threshold: threshold}
}

// Compress appends the s2 block encoding of src to dst and returns it with
// compressed true, or returns dst unchanged with compressed false, in which
// case the caller sends src as it is. It does not keep dst or src; the
// appended bytes belong to the caller. The block starts with the decoded
// length as a varint, which [Decompress] checks against its limit.
//
// Compress does not allocate except to grow its scratch buffer to a new
// largest batch and when appending grows dst.
func (c *Compressor) Compress(dst, src []byte) (out []byte, compressed bool) {
	if c.threshold <= 0 || len(src) < c.threshold {
		return dst, false
	}
	if c.skip > 0 {
		c.skip--
		c.stats.Skipped++
		return dst, false
	}
	n := s2.MaxEncodedLen(len(src))
	if n < 0 {
		return dst, false // beyond s2's block size: never true of a batch
	}
	if cap(c.scratch) < n {
		c.scratch = make([]byte, n)
	}
	c.stats.Attempts++
	enc := s2.Encode(c.scratch[:n], src)
	if len(enc) > len(src)-len(src)/8 {
		c.misses = min(c.misses+1, backoffSteps)
		c.skip = min(1<<(c.misses-1), MaxCompressBackoff)
		return dst, false
	}
	c.misses = 0
	c.stats.Compressed++
	c.stats.BytesIn += uint64(len(src))
	c.stats.BytesOut += uint64(len(enc))
	return append(dst, enc...), true
}

// backoffSteps is the number of consecutive misses after which the skip
// reaches MaxCompressBackoff (1<<6 == 64).
const backoffSteps = 7

// Stats returns a snapshot of the compressor's counters.
func (c *Compressor) Stats() CompressorStats { return c.stats }

// Decompress appends the decoding of the s2 block src to dst and returns the
// extended slice. It first reads the decoded size from the block's header
// and returns a [*TooLargeError] (matching [ErrTooLarge]) if it exceeds
// maxLen, so a decompression bomb costs nothing; a malformed block returns
// [ErrCorrupt]. On error dst is returned with its length unchanged.
//
// dst grows only if its spare capacity is less than the decoded size; src
// must not overlap dst's spare capacity. Decompress keeps neither.
func Decompress(dst, src []byte, maxLen int) ([]byte, error) {
	n, err := s2.DecodedLen(src)
	if err != nil {
		return dst, ErrCorrupt
	}
	if n > maxLen {
		return dst, &TooLargeError{Size: n, Limit: maxLen}
	}
	start := len(dst)
	dst = slices.Grow(dst, n)
	if _, err := s2.Decode(dst[start:start+n], src); err != nil {
		return dst[:start], ErrCorrupt
	}
	return dst[:start+n], nil
}
