package store

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

const segmentExt = ".seg"

// segmentName is the file name of the segment with sequence number seq;
// zero padding makes lexical order the append order.
func segmentName(seq uint64) string {
	return fmt.Sprintf("%020d%s", seq, segmentExt)
}

// parseSegmentName returns the sequence number of a segment file name.
func parseSegmentName(name string) (uint64, bool) {
	base, ok := strings.CutSuffix(name, segmentExt)
	if !ok || len(base) != 20 {
		return 0, false
	}
	seq, err := strconv.ParseUint(base, 10, 64)
	return seq, err == nil
}

// indexEntry is one sparse index point: every record stored before byte off
// of the segment has Ts <= maxBefore. maxBefore never decreases along a
// segment's index, so a binary search finds where a replay may start.
type indexEntry struct {
	off       int64
	maxBefore int64
}

// segment is what the log knows about one segment file. Sealed segments are
// immutable; the active one grows under Log.mu.
type segment struct {
	seq     uint64
	path    string
	size    int64 // bytes of verified batches
	batches int64
	records int64
	minTs   int64 // math.MaxInt64 while empty
	maxTs   int64 // math.MinInt64 while empty
	index   []indexEntry
	lastIdx int64 // offset of the last index entry, 0 if none
}

func newSegment(dir string, seq uint64) segment {
	return segment{
		seq:   seq,
		path:  filepath.Join(dir, segmentName(seq)),
		minTs: math.MaxInt64,
		maxTs: math.MinInt64,
	}
}

// add accounts for a verified batch of n bytes at the segment's end,
// adding an index entry when interval bytes have passed since the last one.
func (s *segment) add(hd header, n int64, interval int64) {
	if s.size-s.lastIdx >= interval {
		s.index = append(s.index, indexEntry{off: s.size, maxBefore: s.maxTs})
		s.lastIdx = s.size
	}
	s.size += n
	s.batches++
	s.records += int64(hd.count)
	s.minTs = min(s.minTs, hd.minTs)
	s.maxTs = max(s.maxTs, hd.maxTs)
}

// startFor returns the offset from which a replay of Ts >= fromTs must read:
// the last index point before which every record has Ts < fromTs.
func (s *segment) startFor(fromTs int64) int64 {
	i := sort.Search(len(s.index), func(i int) bool { return s.index[i].maxBefore >= fromTs })
	if i == 0 {
		return 0
	}
	return s.index[i-1].off
}

// reader streams the batches of one segment through a reusable buffer.
// Memory is bounded by the bufio buffer plus the largest body actually
// present in the file (never a length merely claimed by a header).
type reader struct {
	br   *bufio.Reader
	path string
	off  int64 // offset of the next batch
	end  int64 // end of the readable region
	hdr  [headerLen]byte
	body []byte
	run  []Record
}

const readBufSize = 64 << 10

func newReader() *reader {
	return &reader{br: bufio.NewReaderSize(nil, readBufSize), run: make([]Record, 0, maxRun)}
}

// reset points r at bytes [start, end) of f.
func (r *reader) reset(f *os.File, path string, start, end int64) {
	r.br.Reset(io.NewSectionReader(f, start, end-start))
	r.path = path
	r.off = start
	r.end = end
}

// next reads the next batch header. It returns io.EOF at a clean end and a
// tornError when the bytes at r.off are not the start of a whole batch.
// After a nil error the caller must call body or skip.
func (r *reader) next() (header, error) {
	if r.off == r.end {
		return header{}, io.EOF
	}
	if r.end-r.off < headerLen {
		return header{}, errShortHeader
	}
	if _, err := io.ReadFull(r.br, r.hdr[:]); err != nil {
		return header{}, ioErr(err)
	}
	hd, err := decodeHeader(r.hdr[:])
	if err != nil {
		return header{}, err
	}
	if int64(hd.bodyLen) > r.end-r.off-headerLen {
		return header{}, errBodyPastEOF
	}
	return hd, nil
}

// readBody reads and CRC-checks the body of the batch whose header next
// returned, and advances past it. The result is valid until the next call.
func (r *reader) readBody(hd header) ([]byte, error) {
	if cap(r.body) < hd.bodyLen {
		r.body = make([]byte, hd.bodyLen)
	}
	b := r.body[:hd.bodyLen]
	if _, err := io.ReadFull(r.br, b); err != nil {
		return nil, ioErr(err)
	}
	if err := checkCRC(r.hdr[:], hd, b); err != nil {
		return nil, err
	}
	r.off += headerLen + int64(hd.bodyLen)
	return b, nil
}

// skip advances past the body of the batch whose header next returned,
// without reading it into memory or verifying it.
func (r *reader) skip(hd header) error {
	if _, err := r.br.Discard(hd.bodyLen); err != nil {
		return ioErr(err)
	}
	r.off += headerLen + int64(hd.bodyLen)
	return nil
}

// ioErr turns the short read of a region whose length was checked against
// the file size into a real error: the file shrank under us.
func ioErr(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("store: segment shorter than expected: %w", io.ErrUnexpectedEOF)
	}
	return err
}

// scan verifies the segment file f from the start, filling s. It stops at
// the first batch that is not valid and returns its offset and the reason
// (a tornError); bad is nil when the whole file is valid. Any other error is
// an I/O failure.
func scan(r *reader, f *os.File, s *segment, size int64, interval int64) (bad error, err error) {
	r.reset(f, s.path, 0, size)
	for {
		hd, err := r.next()
		if err == io.EOF {
			return nil, nil
		}
		if te, ok := err.(tornError); ok {
			return te, nil
		}
		if err != nil {
			return nil, err
		}
		body, err := r.readBody(hd)
		if te, ok := err.(tornError); ok {
			return te, nil
		}
		if err != nil {
			return nil, err
		}
		if _, err := decodeRecords(nil, body, hd, 0, nil); err != nil {
			return err, nil
		}
		s.add(hd, headerLen+int64(hd.bodyLen), interval)
	}
}
